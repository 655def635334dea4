//! What div ships: the git set via gix, the walk outside a repository, manifest, hashing and its cache, upload plan.
