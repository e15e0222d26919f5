//! Writes `ui/src/lib/bindings/commands.ts`: one typed TypeScript function per
//! `#[tauri::command]`, generated from the Rust signatures, and
//! `bindings/events.ts`: one typed listener per `PageEvent` constant in
//! `src/page_events.rs`. So the UI never spells a command's name, its
//! arguments' names or an event's name by hand. The types
//! themselves come from ts-rs (`bindings/<Name>.ts`); a type that crosses
//! IPC without one fails here. `./hearth test` fails when the written file
//! differs from the committed one, as it does for the ts-rs files.
//!
//! The commands are read from the source with `syn` rather than through a
//! registry such as tauri-specta, because the types already derive ts-rs and
//! a second type system over the same structs would be two things to keep
//! in step.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use syn::{FnArg, GenericArgument, Item, PathArguments, ReturnType, Type};

const COMMANDS_DIR: &str = "src/commands";
const PAGE_EVENTS: &str = "src/page_events.rs";
const BINDINGS_DIR: &str = "../ui/src/lib/bindings";

/// Parameters Tauri fills in itself; they are not sent from the page.
const INJECTED: &[&str] = &["State", "AppHandle", "Window", "Webview", "WebviewWindow"];

struct Command {
    /// The Rust name, which is also the IPC name.
    name: String,
    docs: Vec<String>,
    /// (camelCase name as Tauri expects it, TypeScript type)
    params: Vec<(String, String)>,
    returns: String,
}

#[test]
fn commands_ts_is_generated_from_the_rust_commands() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bindings = root.join(BINDINGS_DIR);
    let mut named = BTreeSet::new();
    let mut commands = Vec::new();
    for file in rust_files(&root.join(COMMANDS_DIR)) {
        let source = std::fs::read_to_string(&file).unwrap();
        let parsed = syn::parse_file(&source).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for item in parsed.items {
            let Item::Fn(f) = item else { continue };
            if !f.attrs.iter().any(is_command_attribute) {
                continue;
            }
            commands.push(command_of(&f, &mut named));
        }
    }
    commands.sort_by(|a, b| a.name.cmp(&b.name));

    let registered = registered_commands(&root.join(COMMANDS_DIR).join("mod.rs"));
    let defined: BTreeSet<String> = commands.iter().map(|c| c.name.clone()).collect();
    assert_eq!(registered, defined, "every #[tauri::command] is registered in commands::handler, and only those");

    for name in &named {
        assert!(
            bindings.join(format!("{name}.ts")).is_file(),
            "`{name}` crosses IPC but has no ts-rs binding: derive TS with #[ts(export, export_to = \"bindings/\")]"
        );
    }

    write_if_changed(&bindings.join("commands.ts"), &render(&commands, &named));
}

#[test]
fn events_ts_is_generated_from_the_page_events() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bindings = root.join(BINDINGS_DIR);
    let source = std::fs::read_to_string(root.join(PAGE_EVENTS)).unwrap();
    let parsed = syn::parse_file(&source).unwrap();
    let mut named = BTreeSet::new();
    let mut events = Vec::new();
    for item in parsed.items {
        let Item::Const(c) = item else { continue };
        let Some(segment) = last_segment(&c.ty).filter(|s| s.ident == "PageEvent") else { continue };
        let payload = first_generic(segment).expect("PageEvent<T>");
        let payload = ts_type(payload, &mut named).unwrap_or_else(|e| panic!("{}: {e}", c.ident));
        let name = event_name(&c.expr).unwrap_or_else(|| panic!("{}: PageEvent::new(\"literal name\")", c.ident));
        events.push((c.ident.to_string(), name, payload, doc_lines(&c.attrs)));
    }
    assert!(!events.is_empty(), "{PAGE_EVENTS} declares the page's events");
    for name in &named {
        assert!(bindings.join(format!("{name}.ts")).is_file(), "`{name}` is an event payload without a ts-rs binding");
    }
    write_if_changed(&bindings.join("events.ts"), &render_events(&events, &named));
}

fn write_if_changed(path: &Path, text: &str) {
    if std::fs::read_to_string(path).ok().as_deref() != Some(text) {
        std::fs::write(path, text).unwrap();
    }
}

/// The literal in `PageEvent::new("name")`.
fn event_name(expr: &syn::Expr) -> Option<String> {
    let syn::Expr::Call(call) = expr else { return None };
    match call.args.first()? {
        syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) => Some(s.value()),
        _ => None,
    }
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.sort();
    files
}

fn is_command_attribute(attr: &syn::Attribute) -> bool {
    let segments: Vec<String> = attr.path().segments.iter().map(|s| s.ident.to_string()).collect();
    segments == ["tauri", "command"] || segments == ["command"]
}

/// The command names listed in `tauri::generate_handler![…]`.
fn registered_commands(mod_rs: &Path) -> BTreeSet<String> {
    let source = std::fs::read_to_string(mod_rs).unwrap();
    let start = source.find("generate_handler![").expect("commands/mod.rs calls generate_handler!");
    let list = &source[start + "generate_handler![".len()..];
    let list = &list[..list.find(']').expect("generate_handler! is closed")];
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|path| path.rsplit("::").next().unwrap().to_string())
        .collect()
}

fn command_of(f: &syn::ItemFn, named: &mut BTreeSet<String>) -> Command {
    let name = f.sig.ident.to_string();
    let mut params = Vec::new();
    for input in &f.sig.inputs {
        let FnArg::Typed(arg) = input else { panic!("{name}: a command takes no self") };
        if last_segment(&arg.ty).is_some_and(|s| INJECTED.contains(&s.ident.to_string().as_str())) {
            continue;
        }
        let syn::Pat::Ident(ident) = &*arg.pat else { panic!("{name}: parameters are plain names") };
        let ts = ts_type(&arg.ty, named).unwrap_or_else(|e| panic!("{name}({}): {e}", ident.ident));
        params.push((camel_case(&ident.ident.to_string()), ts));
    }
    let returns = match &f.sig.output {
        ReturnType::Default => "void".to_string(),
        ReturnType::Type(_, ty) => {
            let segment = last_segment(ty).expect("a command returns a named type");
            let ty = match segment.ident.to_string().as_str() {
                // A command's error reaches the page as the rejected AppError.
                "AppResult" | "Result" => first_generic(segment).expect("Result<T, _>"),
                _ => ty,
            };
            // `()` arrives as `null`, which the page has no use for.
            let ts = ts_type(ty, named).unwrap_or_else(|e| panic!("{name} -> {e}"));
            if ts == "null" {
                "void".to_string()
            } else {
                ts
            }
        }
    };
    Command { name, docs: doc_lines(&f.attrs), params, returns }
}

fn doc_lines(attrs: &[syn::Attribute]) -> Vec<String> {
    attrs
        .iter()
        .filter_map(|a| match &a.meta {
            syn::Meta::NameValue(nv) if nv.path.is_ident("doc") => match &nv.value {
                syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) => Some(s.value().trim().to_string()),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

fn last_segment(ty: &Type) -> Option<&syn::PathSegment> {
    match ty {
        Type::Path(p) => p.path.segments.last(),
        Type::Reference(r) => last_segment(&r.elem),
        _ => None,
    }
}

fn first_generic(segment: &syn::PathSegment) -> Option<&Type> {
    let PathArguments::AngleBracketed(args) = &segment.arguments else { return None };
    args.args.iter().find_map(|a| match a {
        GenericArgument::Type(t) => Some(t),
        _ => None,
    })
}

/// The TypeScript type that serde's JSON of `ty` has; named types are
/// collected so that they can be imported from their ts-rs files.
fn ts_type(ty: &Type, named: &mut BTreeSet<String>) -> Result<String, String> {
    if let Type::Tuple(t) = ty {
        return if t.elems.is_empty() { Ok("null".into()) } else { Err("tuples do not cross IPC here".into()) };
    }
    let segment = last_segment(ty).ok_or_else(|| "an unsupported type".to_string())?;
    let ident = segment.ident.to_string();
    let inner = |named: &mut BTreeSet<String>| {
        let t = first_generic(segment).ok_or_else(|| format!("{ident} without its parameter"))?;
        ts_type(t, named)
    };
    Ok(match ident.as_str() {
        "bool" => "boolean".into(),
        "u8" | "u16" | "u32" | "u64" | "usize" | "i8" | "i16" | "i32" | "i64" | "isize" | "f32" | "f64" => {
            "number".into()
        }
        "String" | "str" | "PathBuf" | "Path" => "string".into(),
        "Option" => format!("{} | null", inner(named)?),
        "Vec" => {
            let t = inner(named)?;
            if t.contains(' ') {
                format!("({t})[]")
            } else {
                format!("{t}[]")
            }
        }
        "Channel" => format!("Channel<{}>", inner(named)?),
        "Value" => return Err("serde_json::Value has no TypeScript shape: take a type that derives TS".into()),
        _ => {
            if !matches!(segment.arguments, PathArguments::None) {
                return Err(format!("generic type {ident} is not mapped"));
            }
            named.insert(ident.clone());
            ident
        }
    })
}

fn camel_case(snake: &str) -> String {
    let mut out = String::new();
    let mut upper = false;
    for c in snake.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

fn push_docs(out: &mut String, docs: &[String]) {
    if docs.is_empty() {
        return;
    }
    out.push_str("/**\n");
    for line in docs {
        if line.is_empty() {
            out.push_str(" *\n");
        } else {
            out.push_str(&format!(" * {line}\n"));
        }
    }
    out.push_str(" */\n");
}

fn push_imports(out: &mut String, named: &BTreeSet<String>) {
    for name in named {
        out.push_str(&format!("import type {{ {name} }} from './{name}';\n"));
    }
}

/// (constant, event name, payload type, docs)
type Event = (String, String, String, Vec<String>);

fn render_events(events: &[Event], named: &BTreeSet<String>) -> String {
    let mut out = String::from(
        "// This file was generated by src-tauri/tests/ipc_bindings.rs from the\n\
         // PageEvent constants in src-tauri/src/page_events.rs. Do not edit it:\n\
         // `cargo test -p hearth` writes it again.\n\n\
         import { listen, type UnlistenFn } from '@tauri-apps/api/event';\n",
    );
    push_imports(&mut out, named);
    for (constant, name, payload, docs) in events {
        out.push('\n');
        push_docs(&mut out, docs);
        let function = camel_case(&format!("on_{}", constant.to_lowercase()));
        out.push_str(&format!(
            "export function {function}(handler: (payload: {payload}) => void): Promise<UnlistenFn> {{\n  \
             return listen<{payload}>('{name}', (e) => handler(e.payload));\n}}\n"
        ));
    }
    out
}

fn render(commands: &[Command], named: &BTreeSet<String>) -> String {
    let mut out = String::from(
        "// This file was generated by src-tauri/tests/ipc_bindings.rs from the\n\
         // #[tauri::command] functions in src-tauri/src/commands. Do not edit it:\n\
         // `cargo test -p hearth` writes it again.\n\n",
    );
    let uses_channel = commands.iter().any(|c| c.params.iter().any(|(_, t)| t.contains("Channel<")));
    out.push_str(if uses_channel {
        "import { invoke, type Channel } from '@tauri-apps/api/core';\n"
    } else {
        "import { invoke } from '@tauri-apps/api/core';\n"
    });
    push_imports(&mut out, named);
    for c in commands {
        out.push('\n');
        push_docs(&mut out, &c.docs);
        let params: Vec<String> = c.params.iter().map(|(n, t)| format!("{n}: {t}")).collect();
        let names: Vec<&str> = c.params.iter().map(|(n, _)| n.as_str()).collect();
        let args = if names.is_empty() { String::new() } else { format!(", {{ {} }}", names.join(", ")) };
        out.push_str(&format!(
            "export function {}({}): Promise<{}> {{\n  return invoke('{}'{args});\n}}\n",
            camel_case(&c.name),
            params.join(", "),
            c.returns,
            c.name,
        ));
    }
    out
}
