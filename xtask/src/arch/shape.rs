//! The shape of a file's code: its long functions, its `Result<_, String>`s, where it names
//! `HttpError`, outside tests.

use syn::visit::Visit;

use super::modules::is_test;

/// The longest a function outside tests may be, in lines.
pub(crate) const MAX_FN_LINES: usize = 120;

/// Long functions, `Result<_, String>` and `HttpError`, outside tests.
#[derive(Default)]
pub(super) struct ShapeVisitor {
    pub(super) long_fns: Vec<(usize, String, usize)>,
    pub(super) string_errors: Vec<(usize, String)>,
    pub(super) http_errors: Vec<usize>,
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
