//! Models already on this computer, in the folders of the apps people come
//! from: LM Studio, Ollama, Jan, llama.cpp's cache and the Hugging Face
//! cache. Each is listed in place (never copied), under the name its app
//! gives it (`qwen3:8b`), and a file Hearth cannot run is listed with the
//! reason rather than hidden.

use std::collections::HashSet;
use std::io::Read;
use std::path::{Path, PathBuf};

use hearth_engine::ModelFacts;
use serde::Serialize;

/// The app whose folder a model was found in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum FoundIn {
    LmStudio,
    Ollama,
    Jan,
    LlamaCpp,
    HuggingFace,
}

/// One model found, usable or not.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FoundModel {
    pub found_in: FoundIn,
    /// As its app names it.
    pub name: String,
    /// The file that opens it (a split model's first part), where it lies.
    pub path: PathBuf,
    /// Every part's bytes.
    pub size: u64,
    /// `general.architecture`, when the header could be read.
    pub architecture: Option<String>,
    /// Why Hearth cannot run it; `None` when it can.
    pub unusable: Option<String>,
}

/// The systems whose apps keep their models in different folders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Platform {
    Linux,
    MacOs,
    Windows,
}

impl Platform {
    /// The system this was built for.
    pub fn this() -> Self {
        if cfg!(target_os = "macos") {
            Self::MacOs
        } else if cfg!(windows) {
            Self::Windows
        } else {
            Self::Linux
        }
    }
}

/// Where each app keeps its models on `platform`, for a user whose home
/// folder is `home`; `var` reads the environment (`OLLAMA_MODELS`,
/// `LLAMA_CACHE`, `HF_HUB_CACHE`, `HF_HOME`, `LOCALAPPDATA`, `APPDATA`).
pub fn default_places(
    platform: Platform,
    home: &Path,
    var: impl Fn(&str) -> Option<PathBuf>,
) -> Vec<(FoundIn, PathBuf)> {
    let mut places = vec![
        (FoundIn::LmStudio, home.join(".lmstudio").join("models")),
        (FoundIn::LmStudio, home.join(".cache").join("lm-studio").join("models")),
        (FoundIn::Ollama, var("OLLAMA_MODELS").unwrap_or_else(|| home.join(".ollama").join("models"))),
        (FoundIn::Jan, home.join("jan").join("models")),
    ];
    places.push((FoundIn::HuggingFace, crate::hf_cache_dir(home, &var)));
    let llama = var("LLAMA_CACHE");
    match platform {
        Platform::MacOs => {
            let library = home.join("Library");
            places.push((FoundIn::LlamaCpp, llama.unwrap_or_else(|| library.join("Caches").join("llama.cpp"))));
            let jan = library.join("Application Support").join("Jan");
            places.push((FoundIn::Jan, jan.join("data").join("llamacpp").join("models")));
        }
        Platform::Windows => {
            let local = var("LOCALAPPDATA").unwrap_or_else(|| home.join("AppData").join("Local"));
            let roaming = var("APPDATA").unwrap_or_else(|| home.join("AppData").join("Roaming"));
            places.push((FoundIn::LlamaCpp, llama.unwrap_or_else(|| local.join("llama.cpp"))));
            places.push((FoundIn::Jan, roaming.join("Jan").join("data").join("llamacpp").join("models")));
        }
        Platform::Linux => {
            places.push((FoundIn::LlamaCpp, llama.unwrap_or_else(|| home.join(".cache").join("llama.cpp"))));
            let jan = home.join(".local").join("share").join("Jan");
            places.push((FoundIn::Jan, jan.join("data").join("llamacpp").join("models")));
            // Ollama's Linux service keeps its models under its own user.
            places.push((FoundIn::Ollama, PathBuf::from("/usr/share/ollama/.ollama/models")));
        }
    }
    places
}

/// Every model in `places`, each file once (the same blob seen through two
/// apps is listed under the first).
pub fn scan(places: &[(FoundIn, PathBuf)]) -> Vec<FoundModel> {
    let mut found = Vec::new();
    let mut seen = HashSet::new();
    for (app, dir) in places {
        if !dir.is_dir() {
            continue;
        }
        let candidates = match app {
            FoundIn::Ollama => ollama(dir),
            FoundIn::HuggingFace => hf_cache(dir),
            FoundIn::LmStudio | FoundIn::Jan | FoundIn::LlamaCpp => plain(dir, *app),
        };
        for (name, path) in candidates {
            let key = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
            if seen.insert(key) {
                found.push(describe(*app, name, path));
            }
        }
    }
    found
}

/// A found file's facts, or why it cannot run.
fn describe(found_in: FoundIn, name: String, path: PathBuf) -> FoundModel {
    let mut model = FoundModel { found_in, name, size: 0, architecture: None, unusable: None, path };
    let file_name = model.path.file_name().map(|n| n.to_string_lossy().to_lowercase()).unwrap_or_default();
    if model.path.is_dir() {
        model.unusable =
            Some(format!("{}, which Hearth does not run (it runs GGUF files)", folder_format(&model.path)));
        return model;
    }
    if !starts_with_gguf_magic(&model.path) {
        model.size = std::fs::metadata(&model.path).map(|m| m.len()).unwrap_or(0);
        model.unusable = Some("not a GGUF file".into());
        return model;
    }
    match ModelFacts::read(&model.path) {
        Ok(facts) => {
            model.size = facts.file_size;
            if file_name.contains("mmproj") || facts.architecture == "clip" {
                model.unusable = Some("a vision projector, which goes with a model rather than running alone".into());
            } else if !facts.supported {
                model.unusable = Some(format!("its architecture, {}, is not one Hearth runs", facts.architecture));
            }
            model.architecture = Some(facts.architecture);
        }
        Err(e) => {
            model.size = std::fs::metadata(&model.path).map(|m| m.len()).unwrap_or(0);
            // A family Hearth does not know may lack the keys its facts
            // read: say what it is rather than which key is missing.
            let architecture = hearth_engine::GgufFile::open(&model.path)
                .ok()
                .and_then(|f| f.string_opt("general.architecture").map(str::to_string));
            model.unusable = Some(match &architecture {
                Some(a) if hearth_engine::Architecture::from_gguf_name(a).is_none() => {
                    format!("its architecture, {a}, is not one Hearth runs")
                }
                _ => e.to_string(),
            });
            model.architecture = architecture;
        }
    }
    model
}

fn starts_with_gguf_magic(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut magic)).is_ok() && &magic == b"GGUF"
}

/// What a model folder of another format holds.
fn folder_format(dir: &Path) -> &'static str {
    let has = |ext: &str| {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| e.path().extension().is_some_and(|x| x.eq_ignore_ascii_case(ext)))
    };
    if has("safetensors") {
        "safetensors weights (an MLX or Transformers model)"
    } else {
        "a folder of another format"
    }
}

/// LM Studio (`publisher/repo/file.gguf`), Jan (`id/model.gguf`) and
/// llama.cpp's cache (`org_repo_file.gguf`): GGUF files by their path, a
/// split model by its first part; LM Studio's folders of safetensors
/// (MLX) are listed too, as what they are.
fn plain(root: &Path, app: FoundIn) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    walk(root, 0, &mut |path| {
        let rel = path.strip_prefix(root).unwrap_or(path);
        let rel_name = rel.to_string_lossy().replace('\\', "/");
        if path.is_dir() {
            let is_model_folder = std::fs::read_dir(path)
                .into_iter()
                .flatten()
                .flatten()
                .any(|e| e.path().extension().is_some_and(|x| x.eq_ignore_ascii_case("safetensors")));
            if is_model_folder {
                out.push((rel_name, path.to_path_buf()));
            }
            return !is_model_folder;
        }
        if is_first_gguf(path) {
            let name = match app {
                // Jan names a model by its folder.
                FoundIn::Jan => rel
                    .parent()
                    .filter(|p| !p.as_os_str().is_empty())
                    .map_or(rel_name.clone(), |p| p.to_string_lossy().replace('\\', "/")),
                _ => rel_name.trim_end_matches(".gguf").to_string(),
            };
            out.push((name, path.to_path_buf()));
        }
        false
    });
    out
}

/// A `.gguf` file that is not a later part of a split model.
fn is_first_gguf(path: &Path) -> bool {
    path.extension().is_some_and(|x| x.eq_ignore_ascii_case("gguf"))
        && hearth_engine::gguf::split_part(path).is_none_or(|p| p.number == 1)
}

/// Calls `visit` on every entry under `dir` (a few levels deep); `visit`
/// returns whether to go into a folder.
fn walk(dir: &Path, depth: usize, visit: &mut dyn FnMut(&Path) -> bool) {
    if depth > 5 {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        if path.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')) {
            continue;
        }
        if visit(&path) && path.is_dir() {
            walk(&path, depth + 1, visit);
        }
    }
}

/// Ollama: `manifests/HOST/NAMESPACE/MODEL/TAG` (JSON) name their layers;
/// the model layer's digest `sha256:…` is the blob `blobs/sha256-…`, a
/// GGUF file. Named as `ollama list` names it: `qwen3:8b`, `ns/model:tag`,
/// `host/ns/model:tag`.
fn ollama(root: &Path) -> Vec<(String, PathBuf)> {
    let manifests = root.join("manifests");
    let mut out = Vec::new();
    walk(&manifests, 0, &mut |path| {
        if path.is_dir() {
            return true;
        }
        let Ok(rel) = path.strip_prefix(&manifests) else { return false };
        let parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().to_string()).collect();
        let [host, namespace, model, tag] = parts.as_slice() else { return false };
        let name = match (host.as_str(), namespace.as_str()) {
            ("registry.ollama.ai", "library") => format!("{model}:{tag}"),
            ("registry.ollama.ai", ns) => format!("{ns}/{model}:{tag}"),
            (host, ns) => format!("{host}/{ns}/{model}:{tag}"),
        };
        let Ok(text) = std::fs::read_to_string(path) else { return false };
        let Ok(manifest) = serde_json::from_str::<serde_json::Value>(&text) else { return false };
        let layers = manifest.get("layers").and_then(|l| l.as_array()).cloned().unwrap_or_default();
        let model_layer = layers
            .iter()
            .find(|l| l.get("mediaType").and_then(|m| m.as_str()) == Some("application/vnd.ollama.image.model"));
        if let Some(digest) = model_layer.and_then(|l| l.get("digest")).and_then(|d| d.as_str()) {
            let blob = root.join("blobs").join(digest.replace(':', "-"));
            if blob.is_file() {
                out.push((name, blob));
            }
        }
        false
    });
    out
}

/// Every file of a snapshot folder, by its path in the repo, with its size
/// (through the snapshot's links to their blobs).
pub fn snapshot_files(snapshot: &Path) -> Vec<crate::RepoFile> {
    let mut files = Vec::new();
    walk(snapshot, 0, &mut |path| {
        if let Some(meta) = std::fs::metadata(path).ok().filter(|m| m.is_file()) {
            let rel = path.strip_prefix(snapshot).unwrap_or(path).to_string_lossy().replace('\\', "/");
            files.push(crate::RepoFile { path: rel, size: meta.len(), sha256: None });
        }
        true
    });
    files
}

/// The snapshots of repo folder `repo` in a Hugging Face cache, the one
/// `refs/main` names first (older commits may hold quants `main` lacks).
pub fn snapshots_main_first(repo: &Path) -> Vec<PathBuf> {
    let main =
        std::fs::read_to_string(repo.join("refs").join("main")).ok().map(|c| repo.join("snapshots").join(c.trim()));
    let mut all: Vec<PathBuf> =
        std::fs::read_dir(repo.join("snapshots")).into_iter().flatten().flatten().map(|e| e.path()).collect();
    all.sort();
    all.sort_by_key(|p| Some(p) != main.as_ref());
    all
}

/// The Hugging Face cache: `models--ORG--NAME/snapshots/COMMIT/…gguf`,
/// named `org/name:QUANT` (as `--model hf:` takes it), `main`'s first.
fn hf_cache(root: &Path) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    let Ok(repos) = std::fs::read_dir(root) else { return out };
    let mut repos: Vec<PathBuf> = repos.flatten().map(|e| e.path()).collect();
    repos.sort();
    for repo in repos {
        let Some(folder) = repo.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_prefix("models--")) else {
            continue;
        };
        let repo_id = folder.replacen("--", "/", 1);
        let commits = snapshots_main_first(&repo);
        let mut named = HashSet::new();
        for snapshot in commits {
            for file in snapshot_files(&snapshot).into_iter().filter(|f| is_first_gguf(Path::new(&f.path))) {
                let name = format!("{repo_id}:{}", crate::quants::quant_of(&file.path));
                // An older commit's copy of a quant `main` also has is not listed twice.
                if named.insert(name.clone()) {
                    out.push((name, snapshot.join(&file.path)));
                }
            }
        }
    }
    out
}
