//! `cargo xtask arch`: the shape rules ARCHITECTURE.md states, checked on the code itself, so
//! that a claim there cannot quietly stop being true.
//!
//! - **No circle of files inside a crate.** A file depends on another when its code (not its
//!   tests) names an item of the other's modules: through `use`, a path from `crate::`,
//!   `super::` or `self::`, or a child module's name. A re-export (`pub use a::B` in `x.rs`)
//!   is followed to where `B` lives, so a facade is not a dependency of its own. The crate's
//!   root (`lib.rs`, `main.rs`) is left out: it declares the modules, re-exports what
//!   callers need and holds the few types any module may name.
//! - **No function over [`MAX_FN_LINES`] lines** outside tests, from `fn` to its closing brace.
//! - **No file over [`MAX_FILE_LINES`] lines** unless a line of its opening `//!` comment says
//!   why, starting `Why it is long:` (or `Why over N lines:`, `Why one long file:`).
//! - **`Result<_, String>` in no library crate** outside tests: an error says what it is.
//! - **`HttpError` only under `div-server/src/http/`**: the domain does not speak HTTP.
//!
//! The workspace's own unit test (`the_workspace_keeps_its_shape`) runs all of it, so CI fails
//! when a rule is newly broken, or when a finding [`KNOWN`] lists is mended and still listed;
//! `cargo xtask arch` prints every finding, and `cargo xtask arch --map CRATE_DIR` what each
//! file of a crate depends on.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use syn::visit::Visit;

/// The longest a function outside tests may be, in lines.
pub(crate) const MAX_FN_LINES: usize = 120;
/// The longest a file may be without saying why at its top.
pub(crate) const MAX_FILE_LINES: usize = 700;
/// The findings not yet mended, one a line (the workspace's test allows these and no others).
pub(crate) const KNOWN: &str = "xtask/arch-known.txt";
/// What a long file's opening comment says.
const LONG_REASON: &str = "Why it is long:";

/// One broken rule.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Finding {
    /// Files that depend on each other in a circle (each depends on the next, the last on the
    /// first).
    Circle {
        krate: String,
        files: Vec<String>,
    },
    LongFn {
        file: String,
        line: usize,
        name: String,
        lines: usize,
    },
    LongFile {
        file: String,
        lines: usize,
    },
    StringError {
        file: String,
        line: usize,
        item: String,
    },
    HttpErrorOutsideHttp {
        file: String,
        line: usize,
    },
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Finding::Circle { krate, files } => {
                write!(f, "{krate}: a circle of files: {}", files.join(" → "))?;
                if let Some(first) = files.first() {
                    write!(f, " → {first}")?;
                }
                Ok(())
            }
            Finding::LongFn {
                file,
                line,
                name,
                lines,
            } => write!(
                f,
                "{file}:{line}: `{name}` is {lines} lines (at most {MAX_FN_LINES})"
            ),
            Finding::LongFile { file, lines } => write!(
                f,
                "{file}: {lines} lines (over {MAX_FILE_LINES}) and no `//! {LONG_REASON}` at its top"
            ),
            Finding::StringError { file, line, item } => {
                write!(f, "{file}:{line}: `{item}` returns `Result<_, String>`")
            }
            Finding::HttpErrorOutsideHttp { file, line } => {
                write!(f, "{file}:{line}: `HttpError` outside `http/`")
            }
        }
    }
}

/// `cargo xtask arch`: prints each finding and fails when there is one.
pub(crate) fn run(root: &Path) -> Result<()> {
    let findings = check_workspace(root)?;
    #[allow(clippy::print_stdout)]
    for finding in &findings {
        println!("{finding}");
    }
    if !findings.is_empty() {
        bail!(
            "{} finding(s); those not yet mended are listed in {KNOWN}",
            findings.len()
        );
    }
    #[allow(clippy::print_stdout)]
    {
        println!("the workspace keeps its shape");
    }
    Ok(())
}

/// Every rule, over every crate of the workspace (`crates/*`, `xtask`, `examples/*`), vendored
/// code left out.
pub(crate) fn check_workspace(root: &Path) -> Result<Vec<Finding>> {
    let mut dirs = Vec::new();
    for parent in ["crates", "examples"] {
        let Ok(entries) = std::fs::read_dir(root.join(parent)) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.path().join("Cargo.toml").is_file() {
                dirs.push(entry.path());
            }
        }
    }
    dirs.push(root.join("xtask"));
    dirs.sort();
    let mut findings = Vec::new();
    for dir in dirs {
        findings.extend(check_crate(root, &dir)?);
    }
    findings.sort();
    Ok(findings)
}

/// The rules over one crate at `dir`.
pub(crate) fn check_crate(root: &Path, dir: &Path) -> Result<Vec<Finding>> {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let rel = |p: &Path| {
        p.strip_prefix(root)
            .unwrap_or(p)
            .to_string_lossy()
            .into_owned()
    };
    let mut findings = Vec::new();
    let library = dir.join("src/lib.rs").is_file();
    for file in rust_files(dir)? {
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        let lines = text.lines().count();
        if lines > MAX_FILE_LINES && !says_why_long(&text) {
            findings.push(Finding::LongFile {
                file: rel(&file),
                lines,
            });
        }
    }
    for root_file in ["src/lib.rs", "src/main.rs"] {
        let root_file = dir.join(root_file);
        if !root_file.is_file() {
            continue;
        }
        let tree = ModuleTree::load(&root_file)?;
        for (id, file) in tree.files.iter().enumerate() {
            let src = &tree.sources[id];
            let mut shape = ShapeVisitor::default();
            shape.visit_file(src);
            for (line, fn_name, fn_lines) in shape.long_fns {
                findings.push(Finding::LongFn {
                    file: rel(file),
                    line,
                    name: fn_name,
                    lines: fn_lines,
                });
            }
            if library {
                for (line, item) in shape.string_errors {
                    findings.push(Finding::StringError {
                        file: rel(file),
                        line,
                        item,
                    });
                }
            }
            if name == "div-server" && !file.starts_with(dir.join("src/http")) {
                for line in shape.http_errors {
                    findings.push(Finding::HttpErrorOutsideHttp {
                        file: rel(file),
                        line,
                    });
                }
            }
        }
        for circle in tree.circles() {
            findings.push(Finding::Circle {
                krate: name.clone(),
                files: circle
                    .iter()
                    .map(|&id| rel(&tree.files[id]).replacen(&format!("crates/{name}/"), "", 1))
                    .collect(),
            });
        }
    }
    Ok(findings)
}

/// Whether a long file says why at its top (its opening `//!` lines).
fn says_why_long(text: &str) -> bool {
    text.lines()
        .take_while(|l| l.starts_with("//!") || l.trim().is_empty() || l.starts_with("#!"))
        .map(|l| l.trim_start_matches("//!").trim_start())
        .any(|l| {
            // `Why it is long: …`, or as earlier files say it: `Why over 700 lines: …`,
            // `Why one long file: …`.
            l.starts_with(LONG_REASON)
                || (l.starts_with("Why ")
                    && l.split(':').next().is_some_and(|head| {
                        head.ends_with(" lines") || head.ends_with("long file")
                    }))
        })
}

/// Every `.rs` file under `dir`, `target/`, `vendor/` and fuzz corpora left out.
fn rust_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).with_context(|| format!("listing {}", d.display()))? {
            let entry = entry?;
            let path = entry.path();
            let file_name = entry.file_name();
            if entry.file_type()?.is_dir() {
                if !matches!(
                    file_name.to_str(),
                    Some("target" | "vendor" | "corpus" | "artifacts" | "node_modules")
                ) {
                    stack.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Whether attributes put an item under `cfg(test)` (or mark a test).
fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        let path = a.path();
        if path.is_ident("test") {
            return true;
        }
        if path.is_ident("cfg") {
            let tokens = a.meta.require_list().map(|l| l.tokens.to_string());
            return tokens.is_ok_and(|t| {
                t.split(|c: char| !c.is_alphanumeric() && c != '_')
                    .any(|w| w == "test")
                    && !t.contains("not (test")
                    && !t.contains("not(test")
            });
        }
        false
    })
}

/// A crate's modules: which file each module path is in, and each file's parsed source.
struct ModuleTree {
    /// Files by id; id 0 is the crate's root.
    files: Vec<PathBuf>,
    sources: Vec<syn::File>,
    /// Every module path (inline modules too) → the file it is written in.
    modules: HashMap<Vec<String>, usize>,
    /// Each file's module path (of the file itself, not its inline modules).
    paths: Vec<Vec<String>>,
}

impl ModuleTree {
    fn load(root: &Path) -> Result<ModuleTree> {
        let mut tree = ModuleTree {
            files: Vec::new(),
            sources: Vec::new(),
            modules: HashMap::new(),
            paths: Vec::new(),
        };
        tree.add_file(root, Vec::new(), true)?;
        Ok(tree)
    }

    fn add_file(&mut self, file: &Path, path: Vec<String>, owns_dir: bool) -> Result<()> {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        let parsed =
            syn::parse_file(&text).with_context(|| format!("parsing {}", file.display()))?;
        let id = self.files.len();
        self.files.push(file.to_path_buf());
        self.paths.push(path.clone());
        self.modules.insert(path.clone(), id);
        // A `mod.rs`, `lib.rs` or `main.rs` keeps its children beside it; `a.rs` in `a/`.
        let dir = if owns_dir {
            file.parent().map(Path::to_path_buf).unwrap_or_default()
        } else {
            file.with_extension("")
        };
        let items = parsed.items.clone();
        self.sources.push(parsed);
        self.add_items(&items, &dir, &path, id)
    }

    fn add_items(
        &mut self,
        items: &[syn::Item],
        dir: &Path,
        path: &[String],
        id: usize,
    ) -> Result<()> {
        for item in items {
            let syn::Item::Mod(m) = item else { continue };
            if is_test(&m.attrs) {
                continue;
            }
            let mut child = path.to_vec();
            child.push(m.ident.to_string());
            if let Some((_, inner)) = &m.content {
                self.modules.insert(child.clone(), id);
                self.add_items(inner, &dir.join(m.ident.to_string()), &child, id)?;
                continue;
            }
            let name = m.ident.to_string();
            let flat = dir.join(format!("{name}.rs"));
            let nested = dir.join(&name).join("mod.rs");
            if flat.is_file() {
                self.add_file(&flat, child, false)?;
            } else if nested.is_file() {
                self.add_file(&nested, child, true)?;
            } else {
                bail!("module `{name}` of {} has no file", dir.display());
            }
        }
        Ok(())
    }

    /// The file where the item `path` names lives, following imports and re-exports of the
    /// module it goes through (`depth` bounds a chain of them).
    fn resolve(&self, path: &[String], imports: &[Imports], depth: usize) -> Option<usize> {
        // The longest prefix that is a module.
        let (module_len, file) = (0..=path.len())
            .rev()
            .find_map(|n| self.modules.get(&path[..n]).map(|&f| (n, f)))?;
        if depth > 0 && module_len < path.len() {
            let module = &path[..module_len];
            let name = &path[module_len];
            if let Some(target) = imports[file].get(module).and_then(|m| m.get(name)) {
                let mut next = target.clone();
                next.extend_from_slice(&path[module_len + 1..]);
                if next != path {
                    return self.resolve(&next, imports, depth - 1).or(Some(file));
                }
            }
        }
        Some(file)
    }

    /// Each file's dependencies on the others.
    fn edges(&self) -> Vec<BTreeSet<usize>> {
        let imports: Vec<Imports> = self
            .sources
            .iter()
            .zip(&self.paths)
            .map(|(src, path)| {
                let mut v = UseVisitor {
                    tree: self,
                    module: path.clone(),
                    imports: Imports::new(),
                    used: Vec::new(),
                };
                v.visit_file(src);
                v.imports
            })
            .collect();
        let mut edges = vec![BTreeSet::new(); self.files.len()];
        for (id, src) in self.sources.iter().enumerate() {
            let mut v = UseVisitor {
                tree: self,
                module: self.paths[id].clone(),
                imports: Imports::new(),
                used: Vec::new(),
            };
            v.visit_file(src);
            // The crate's root is left out: it declares the modules, re-exports what callers
            // need and holds the few types any module may name (ARCHITECTURE.md).
            if id == 0 {
                continue;
            }
            for used in v.used {
                if let Some(target) = self.resolve(&used, &imports, 8)
                    && target != id
                    && target != 0
                {
                    edges[id].insert(target);
                }
            }
        }
        edges
    }

    /// The circles of files: each strongly connected set of more than one file, in a cycle's
    /// order where one is easy to see.
    fn circles(&self) -> Vec<Vec<usize>> {
        let edges = self.edges();
        strongly_connected(&edges)
            .into_iter()
            .filter(|c| c.len() > 1)
            .collect()
    }
}

/// Per module path, its imported and re-exported names → the absolute path they stand for.
type Imports = HashMap<Vec<String>, HashMap<String, Vec<String>>>;

/// Collects, per module, what its `use`s bring in, and every path its code names that leads
/// into the crate.
struct UseVisitor<'t> {
    tree: &'t ModuleTree,
    module: Vec<String>,
    imports: Imports,
    used: Vec<Vec<String>>,
}

impl UseVisitor<'_> {
    /// `path` (as written in `self.module`) made absolute, or `None` when it leads outside
    /// the crate.
    fn absolute(&self, path: &[String]) -> Option<Vec<String>> {
        let first = path.first()?;
        let mut out;
        let rest;
        match first.as_str() {
            "crate" => {
                out = Vec::new();
                rest = &path[1..];
            }
            "self" => {
                out = self.module.clone();
                rest = &path[1..];
            }
            "super" => {
                out = self.module.clone();
                let mut i = 0;
                while path.get(i).is_some_and(|s| s == "super") {
                    out.pop()?;
                    i += 1;
                }
                rest = &path[i..];
            }
            _ => {
                let mut child = self.module.clone();
                child.push(first.clone());
                if self.tree.modules.contains_key(&child) {
                    out = child;
                    rest = &path[1..];
                } else if let Some(target) =
                    self.imports.get(&self.module).and_then(|m| m.get(first))
                {
                    out = target.clone();
                    rest = &path[1..];
                } else {
                    return None;
                }
            }
        }
        out.extend(rest.iter().filter(|s| *s != "self").cloned());
        Some(out)
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let name = n.ident.to_string();
                let mut full = prefix.clone();
                full.push(name.clone());
                let local = if name == "self" {
                    prefix.last().cloned().unwrap_or_default()
                } else {
                    name
                };
                self.import(&full, local);
            }
            syn::UseTree::Rename(r) => {
                let mut full = prefix.clone();
                full.push(r.ident.to_string());
                self.import(&full, r.rename.to_string());
            }
            syn::UseTree::Glob(_) => {
                if let Some(abs) = self.absolute(prefix) {
                    self.used.push(abs);
                }
            }
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t);
                }
            }
        }
    }

    fn import(&mut self, full: &[String], local: String) {
        if let Some(abs) = self.absolute(full) {
            self.used.push(abs.clone());
            self.imports
                .entry(self.module.clone())
                .or_default()
                .insert(local, abs);
        }
    }
}

impl<'ast> Visit<'ast> for UseVisitor<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs = match item {
            syn::Item::Fn(i) => &i.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Mod(i) => &i.attrs,
            syn::Item::Use(i) => &i.attrs,
            syn::Item::Const(i) => &i.attrs,
            syn::Item::Static(i) => &i.attrs,
            syn::Item::Struct(i) => &i.attrs,
            syn::Item::Enum(i) => &i.attrs,
            syn::Item::Trait(i) => &i.attrs,
            _ => return syn::visit::visit_item(self, item),
        };
        if is_test(attrs) {
            return;
        }
        syn::visit::visit_item(self, item);
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        let mut prefix = Vec::new();
        // A re-export is followed where it is used (`resolve`), not a dependency of its own.
        let reexport = !matches!(item.vis, syn::Visibility::Inherited);
        let before = self.used.len();
        self.use_tree(&mut prefix, &item.tree);
        if reexport {
            self.used.truncate(before);
        }
    }

    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        if item.content.is_some() {
            self.module.push(item.ident.to_string());
            syn::visit::visit_item_mod(self, item);
            self.module.pop();
        }
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !is_test(&f.attrs) {
            syn::visit::visit_impl_item_fn(self, f);
        }
    }

    /// `pub(super)`, `pub(in crate::a)`: who may see an item, not what it uses.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        if (segments.len() > 1 || segments.first().is_some_and(|s| s != "Self"))
            && let Some(abs) = self.absolute(&segments)
        {
            self.used.push(abs);
        }
        syn::visit::visit_path(self, path);
    }
}

/// Long functions, `Result<_, String>` and `HttpError`, outside tests.
#[derive(Default)]
struct ShapeVisitor {
    long_fns: Vec<(usize, String, usize)>,
    string_errors: Vec<(usize, String)>,
    http_errors: Vec<usize>,
}

impl ShapeVisitor {
    fn function(&mut self, name: String, sig: &syn::Signature, block: &syn::Block) {
        let start = sig.fn_token.span.start().line;
        let end = block.brace_token.span.close().end().line;
        let lines = end + 1 - start;
        if lines > MAX_FN_LINES {
            self.long_fns.push((start, name.clone(), lines));
        }
        if let syn::ReturnType::Type(_, ty) = &sig.output
            && returns_string_error(ty)
        {
            self.string_errors.push((start, name));
        }
    }

    fn tokens(&mut self, tokens: proc_macro2::TokenStream) {
        for tt in tokens {
            match tt {
                proc_macro2::TokenTree::Ident(i) if i == "HttpError" => {
                    self.http_errors.push(i.span().start().line);
                }
                proc_macro2::TokenTree::Group(g) => self.tokens(g.stream()),
                _ => {}
            }
        }
    }
}

/// Whether `ty` is `Result<_, String>` (any `Result` whose second argument is `String`).
fn returns_string_error(ty: &syn::Type) -> bool {
    let syn::Type::Path(p) = ty else { return false };
    let Some(last) = p.path.segments.last() else {
        return false;
    };
    if last.ident != "Result" {
        return false;
    }
    let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
        return false;
    };
    let Some(syn::GenericArgument::Type(syn::Type::Path(err))) = args.args.iter().nth(1) else {
        return false;
    };
    err.path
        .segments
        .last()
        .is_some_and(|s| s.ident == "String")
}

impl<'ast> Visit<'ast> for ShapeVisitor {
    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        if !is_test(&item.attrs) {
            syn::visit::visit_item_mod(self, item);
        }
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if is_test(&f.attrs) {
            return;
        }
        self.function(f.sig.ident.to_string(), &f.sig, &f.block);
        syn::visit::visit_item_fn(self, f);
    }

    fn visit_item_impl(&mut self, item: &'ast syn::ItemImpl) {
        if !is_test(&item.attrs) {
            syn::visit::visit_item_impl(self, item);
        }
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if is_test(&f.attrs) {
            return;
        }
        self.function(f.sig.ident.to_string(), &f.sig, &f.block);
        syn::visit::visit_impl_item_fn(self, f);
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if let Some(block) = &f.default {
            self.function(f.sig.ident.to_string(), &f.sig, block);
        } else if let syn::ReturnType::Type(_, ty) = &f.sig.output
            && returns_string_error(ty)
        {
            self.string_errors
                .push((f.sig.fn_token.span.start().line, f.sig.ident.to_string()));
        }
        syn::visit::visit_trait_item_fn(self, f);
    }

    fn visit_ident(&mut self, ident: &'ast proc_macro2::Ident) {
        if ident == "HttpError" {
            self.http_errors.push(ident.span().start().line);
        }
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.tokens(mac.tokens.clone());
        syn::visit::visit_macro(self, mac);
    }
}

/// Tarjan's strongly connected components, each in the order of a path through it.
fn strongly_connected(edges: &[BTreeSet<usize>]) -> Vec<Vec<usize>> {
    struct State<'e> {
        edges: &'e [BTreeSet<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(s: &mut State<'_>, v: usize) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for &w in &s.edges[v] {
            match s.index[w] {
                None => {
                    visit(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(i) if s.on_stack[w] => s.low[v] = s.low[v].min(i),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            component.reverse();
            s.out.push(component);
        }
    }
    let n = edges.len();
    let mut s = State {
        edges,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if s.index[v].is_none() {
            visit(&mut s, v);
        }
    }
    s.out
}

/// `cargo xtask arch --map DIR`: each file of the crate at `DIR` and the files it depends on.
pub(crate) fn print_map(dir: &Path) -> Result<()> {
    #[allow(clippy::print_stdout)]
    for (file, targets) in dependency_map(dir)? {
        let targets: Vec<&str> = targets.iter().map(String::as_str).collect();
        println!("{file} → {}", targets.join(", "));
    }
    Ok(())
}

/// What each crate's files depend on, for `cargo xtask arch --map`.
pub(crate) fn dependency_map(dir: &Path) -> Result<BTreeMap<String, BTreeSet<String>>> {
    let mut out = BTreeMap::new();
    for root_file in ["src/lib.rs", "src/main.rs"] {
        let root_file = dir.join(root_file);
        if !root_file.is_file() {
            continue;
        }
        let tree = ModuleTree::load(&root_file)?;
        let name = |id: usize| {
            tree.files[id]
                .strip_prefix(dir)
                .unwrap_or(&tree.files[id])
                .to_string_lossy()
                .into_owned()
        };
        for (id, targets) in tree.edges().into_iter().enumerate() {
            out.insert(name(id), targets.into_iter().map(name).collect());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
