//! The image's `User`, resolved against its own `/etc/passwd` and `/etc/group` as docker
//! does: `name`, `uid`, `name:group`, `uid:gid`.

use std::path::Path;

use crate::unpack::paths::read_in_root;

const DB_MAX: u64 = 4 << 20;

/// Numeric ids a run starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserIds {
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
}

/// The error returned by [`Image::user`](crate::Image::user).
#[derive(Debug, thiserror::Error)]
pub enum UserError {
    /// A user name the image's `/etc/passwd` does not have.
    #[error(
        "the image's user `{user}` is not in its /etc/passwd; name a user it has, or a numeric uid"
    )]
    UnknownUser {
        /// The name.
        user: String,
    },
    /// A group name the image's `/etc/group` does not have.
    #[error(
        "the image's group `{group}` is not in its /etc/group; name a group it has, or a numeric gid"
    )]
    UnknownGroup {
        /// The name.
        group: String,
    },
    /// The `User` field is malformed.
    #[error("the image's `User` `{0}` is not `user[:group]`")]
    Invalid(String),
    /// The image's `/etc/passwd` or `/etc/group` could not be read.
    #[error("cannot read the image's {file}")]
    Read {
        /// Which file.
        file: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// `(name, id, gid)` rows of a passwd (gid present) or group (gid = id) file.
fn rows(text: &str) -> impl Iterator<Item = (&str, u32, u32)> {
    text.lines().filter_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        let id = f.get(2)?.parse().ok()?;
        let gid = f.get(3).and_then(|g| g.parse().ok()).unwrap_or(id);
        Some((*f.first()?, id, gid))
    })
}

fn read(root: &Path, file: &'static str) -> Result<String, UserError> {
    let bytes = read_in_root(root, file, DB_MAX)
        .map_err(|source| UserError::Read { file, source })?
        .unwrap_or_default();
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Resolves `spec` (an image's `User`) inside `rootfs`.
pub(crate) fn resolve(rootfs: &Path, spec: &str) -> Result<UserIds, UserError> {
    let (user, group) = match spec.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (spec, None),
    };
    if user.is_empty() || group.is_some_and(str::is_empty) {
        return Err(UserError::Invalid(spec.escape_debug().to_string()));
    }
    let passwd = read(rootfs, "/etc/passwd")?;
    let (uid, mut gid) = match user.parse::<u32>() {
        Ok(uid) => (uid, rows(&passwd).find(|r| r.1 == uid).map_or(0, |r| r.2)),
        Err(_) => match rows(&passwd).find(|r| r.0 == user) {
            Some((_, uid, gid)) => (uid, gid),
            None => {
                return Err(UserError::UnknownUser {
                    user: user.escape_debug().to_string(),
                });
            }
        },
    };
    if let Some(group) = group {
        gid = match group.parse::<u32>() {
            Ok(g) => g,
            Err(_) => {
                let groups = read(rootfs, "/etc/group")?;
                match rows(&groups).find(|r| r.0 == group) {
                    Some((_, g, _)) => g,
                    None => {
                        return Err(UserError::UnknownGroup {
                            group: group.escape_debug().to_string(),
                        });
                    }
                }
            }
        };
    }
    Ok(UserIds { uid, gid })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_like_docker() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("etc")).unwrap();
        std::fs::write(
            root.path().join("etc/passwd"),
            "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1001::/home/app:/bin/sh\nbroken line\n",
        )
        .unwrap();
        std::fs::write(root.path().join("etc/group"), "root:x:0:\nstaff:x:50:\n").unwrap();
        let ids = |s: &str| {
            resolve(root.path(), s)
                .map(|u| (u.uid, u.gid))
                .map_err(|e| e.to_string())
        };
        assert_eq!(ids("app"), Ok((1000, 1001)));
        assert_eq!(ids("1000"), Ok((1000, 1001)));
        assert_eq!(ids("4242"), Ok((4242, 0)));
        assert_eq!(ids("app:staff"), Ok((1000, 50)));
        assert_eq!(ids("0:7"), Ok((0, 7)));
        assert_eq!(ids("nobody"), Err("the image's user `nobody` is not in its /etc/passwd; name a user it has, or a numeric uid".to_owned()));
        assert_eq!(ids("app:wheel"), Err("the image's group `wheel` is not in its /etc/group; name a group it has, or a numeric gid".to_owned()));
        assert_eq!(
            ids(":x"),
            Err("the image's `User` `:x` is not `user[:group]`".to_owned())
        );
    }

    #[test]
    fn a_passwd_symlinked_outside_is_read_inside_the_tree() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("passwd"), "evil:x:0:0::/:/bin/sh\n").unwrap();
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("etc")).unwrap();
        std::os::unix::fs::symlink(
            outside.path().join("passwd"),
            root.path().join("etc/passwd"),
        )
        .unwrap();
        assert!(matches!(
            resolve(root.path(), "evil"),
            Err(UserError::UnknownUser { .. })
        ));
    }
}
