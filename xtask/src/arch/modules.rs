//! A crate's files as modules, and what each depends on: the module tree read from its root
//! (`mod` declarations, test modules left out), every path its code names resolved to the file
//! it leads into (through `use`s and re-exports), and the circles among them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use syn::visit::Visit;

/// Whether attributes put an item under `cfg(test)` (or mark a test).
pub(super) fn is_test(attrs: &[syn::Attribute]) -> bool {
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
pub(super) struct ModuleTree {
    /// Files by id; id 0 is the crate's root.
    pub(super) files: Vec<PathBuf>,
    pub(super) sources: Vec<syn::File>,
    /// Every module path (inline modules too) → the file it is written in.
    modules: HashMap<Vec<String>, usize>,
    /// Each file's module path (of the file itself, not its inline modules).
    paths: Vec<Vec<String>>,
}

impl ModuleTree {
    pub(super) fn load(root: &Path) -> Result<ModuleTree> {
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
    pub(super) fn edges(&self) -> Vec<BTreeSet<usize>> {
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
    pub(super) fn circles(&self) -> Vec<Vec<usize>> {
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
