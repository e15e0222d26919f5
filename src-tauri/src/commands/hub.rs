//! Get models: search the Hub, a repo's quants with their fit on this
//! computer, downloads; and the models other apps keep on this computer.

use std::path::Path;

use hearth_hub::{group_quants, Fit, FoundIn, SearchSort};
use serde::{Deserialize, Serialize};
use tauri::State;
use ts_rs::TS;

use super::blocking;
use super::models::LibraryFacts;
use crate::config::AppConfig;
use crate::error::{AppError, AppResult, ErrorKind};
use crate::hub::{hub_error, DownloadAction, HubDownload, HubState, HubTokenStorage};
use crate::state::AppState;

/// How search results are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(export, export_to = "bindings/")]
pub enum HubSort {
    Downloads,
    Trending,
    Recent,
    Likes,
}

/// A repo in the search results.
#[derive(Debug, Clone, Serialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(export, export_to = "bindings/")]
pub struct HubRepoSummary {
    /// `org/name`.
    pub id: String,
    #[ts(type = "number")]
    pub downloads: u64,
    #[ts(type = "number")]
    pub likes: u64,
    /// ISO 8601.
    pub last_modified: Option<String>,
    pub license: Option<String>,
    pub gated: bool,
}

impl From<hearth_hub::RepoSummary> for HubRepoSummary {
    fn from(r: hearth_hub::RepoSummary) -> Self {
        Self {
            id: r.id,
            downloads: r.downloads,
            likes: r.likes,
            last_modified: r.last_modified,
            license: r.license,
            gated: r.gated,
        }
    }
}

/// A repo's page: its models by quant, its projectors, its README.
#[derive(Debug, Clone, Serialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(export, export_to = "bindings/")]
pub struct HubRepo {
    pub summary: HubRepoSummary,
    /// The commit listed (a download fetches this one).
    pub commit: String,
    pub quants: Vec<HubQuant>,
    /// Vision projectors (`mmproj`), which go with a model.
    pub projectors: Vec<String>,
    /// The README as text, to be shown as model text is (sanitised).
    pub readme: Option<String>,
}

/// One model of a repo: a quant, in one or more parts.
#[derive(Debug, Clone, Serialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(export, export_to = "bindings/")]
pub struct HubQuant {
    /// Its first file, which names it among the repo's models.
    pub first: String,
    pub name: String,
    #[ts(type = "number")]
    pub size: u64,
    /// Its files; more than one for a model split into parts.
    pub files: Vec<String>,
}

/// A quant's facts read from its header, and whether it fits this computer.
#[derive(Debug, Clone, Serialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(export, export_to = "bindings/")]
pub struct HubQuantFacts {
    pub fit: HubFit,
    /// The memory the label was judged against.
    #[ts(type = "number")]
    pub memory_bytes: u64,
    pub facts: LibraryFacts,
}

/// "fits", "fits at 8k context", "too big".
#[derive(Debug, Clone, Copy, Serialize, TS)]
#[serde(rename_all = "camelCase", tag = "kind")]
#[ts(export, export_to = "bindings/")]
pub enum HubFit {
    Fits { context: u32 },
    FitsAt { context: u32 },
    TooBig,
}

#[tauri::command]
pub async fn hub_search(hub: State<'_, HubState>, query: String, sort: HubSort) -> AppResult<Vec<HubRepoSummary>> {
    let hub = hub.hub();
    let sort = match sort {
        HubSort::Downloads => SearchSort::Downloads,
        HubSort::Trending => SearchSort::Trending,
        HubSort::Recent => SearchSort::Recent,
        HubSort::Likes => SearchSort::Likes,
    };
    blocking(move || Ok(hub.search(&query, sort, 40).map_err(hub_error)?.into_iter().map(Into::into).collect())).await
}

#[tauri::command]
pub async fn hub_repo(state: State<'_, HubState>, repo: String) -> AppResult<HubRepo> {
    let hub = state.hub();
    let (repo_id, details, readme) = blocking(move || {
        let details = hub.repo(&repo, None).map_err(hub_error)?;
        let readme = hub.readme(&repo, &details.commit).map_err(hub_error)?;
        Ok((repo, details, readme))
    })
    .await?;
    let (quants, projectors) = group_quants(&details.files);
    state.remember_listing(&repo_id, &details.commit, quants.clone());
    Ok(HubRepo {
        summary: details.summary.into(),
        commit: details.commit,
        quants: quants
            .into_iter()
            .map(|q| HubQuant {
                first: q.first().to_string(),
                files: q.files.iter().map(|f| f.path.clone()).collect(),
                name: q.name,
                size: q.size,
            })
            .collect(),
        projectors: projectors.into_iter().map(|f| f.path).collect(),
        readme,
    })
}

/// The model of `repo` at `commit` whose first file is `first`: from the
/// page's listing, else listed again. Returns the commit the Hub confirmed.
async fn find_quant(state: &HubState, repo: &str, commit: &str, first: &str) -> AppResult<(String, hearth_hub::Quant)> {
    if let Some(q) = state.listed_quant(repo, commit, first) {
        return Ok((commit.to_string(), q));
    }
    let (hub, repo, commit, first) = (state.hub(), repo.to_string(), commit.to_string(), first.to_string());
    blocking(move || {
        let details = hub.repo(&repo, Some(&commit)).map_err(hub_error)?;
        let quant = group_quants(&details.files)
            .0
            .into_iter()
            .find(|q| q.first() == first)
            .ok_or_else(|| AppError::new(ErrorKind::NotFound, format!("{repo} has no {first} at this commit")))?;
        Ok((details.commit, quant))
    })
    .await
}

/// The memory a model may take here: most of this computer's (the rest is
/// the system's and the other apps').
fn usable_memory() -> u64 {
    crate::worker::total_memory_bytes().map_or(8 << 30, |total| total / 10 * 8)
}

/// Reads a quant's header over HTTP (one range request per part) and says
/// whether it fits.
#[tauri::command]
pub async fn hub_quant_facts(
    state: State<'_, HubState>,
    repo: String,
    commit: String,
    first: String,
) -> AppResult<HubQuantFacts> {
    let (commit, quant) = find_quant(&state, &repo, &commit, &first).await?;
    let hub = state.hub();
    blocking(move || {
        let facts = hub.facts(&repo, &commit, &quant).map_err(hub_error)?;
        let memory = usable_memory();
        let fit = match Fit::judge(&facts, memory) {
            Fit::Fits(context) => HubFit::Fits { context },
            Fit::FitsAt(context) => HubFit::FitsAt { context },
            Fit::TooBig => HubFit::TooBig,
        };
        Ok(HubQuantFacts { fit, memory_bytes: memory, facts: facts.into() })
    })
    .await
}

/// Queues the download of the model whose first file is `first`; returns
/// its id in `hub_downloads`.
#[tauri::command]
pub async fn hub_download(state: State<'_, HubState>, repo: String, commit: String, first: String) -> AppResult<u32> {
    let (commit, quant) = find_quant(&state, &repo, &commit, &first).await?;
    state.enqueue(&repo, &commit, quant)
}

#[tauri::command]
pub async fn hub_download_act(hub: State<'_, HubState>, id: u32, action: DownloadAction) -> AppResult<()> {
    hub.act(id, action)
}

/// The download queue as it is now (later changes come as `hub-downloads` events).
#[tauri::command]
pub async fn hub_downloads(hub: State<'_, HubState>) -> AppResult<Vec<HubDownload>> {
    Ok(hub.downloads())
}

#[tauri::command]
pub async fn hub_token_get(hub: State<'_, HubState>) -> AppResult<HubTokenStorage> {
    Ok(hub.token_storage())
}

/// Keeps the Hub token (for gated repos) in the keychain; empty forgets it.
#[tauri::command]
pub async fn hub_token_set(hub: State<'_, HubState>, token: Option<String>) -> AppResult<HubTokenStorage> {
    Ok(hub.set_token(token.as_deref()))
}

/// A model found in another app's folder.
#[derive(Debug, Clone, Serialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(export, export_to = "bindings/")]
pub struct FoundModelRow {
    /// The app, in words (`LM Studio`).
    pub app: String,
    /// As that app names it.
    pub name: String,
    pub path: String,
    #[ts(type = "number")]
    pub size: u64,
    pub architecture: Option<String>,
    /// Why Hearth cannot run it, if it cannot.
    pub unusable: Option<String>,
    /// Whether the library lists it already.
    pub in_library: bool,
}

fn app_name(app: FoundIn) -> &'static str {
    match app {
        FoundIn::LmStudio => "LM Studio",
        FoundIn::Ollama => "Ollama",
        FoundIn::Jan => "Jan",
        FoundIn::LlamaCpp => "llama.cpp",
        FoundIn::HuggingFace => "Hugging Face",
    }
}

async fn found_models(state: &AppState, config: &AppConfig) -> AppResult<Vec<FoundModelRow>> {
    let listed: Vec<String> =
        state.store()?.recent_models(super::models::LIBRARY_LIMIT)?.into_iter().map(|m| m.path).collect();
    let places = config.other_apps_places();
    blocking(move || {
        Ok(hearth_hub::scan(&places)
            .into_iter()
            .map(|m| FoundModelRow {
                app: app_name(m.found_in).to_string(),
                in_library: listed.iter().any(|p| Path::new(p) == m.path),
                name: m.name,
                path: m.path.display().to_string(),
                size: m.size,
                architecture: m.architecture,
                unusable: m.unusable,
            })
            .collect())
    })
    .await
}

/// The models in other apps' folders (LM Studio, Ollama, Jan, llama.cpp,
/// the Hugging Face cache), usable or not.
#[tauri::command]
pub async fn models_find_on_disk(
    state: State<'_, AppState>,
    config: State<'_, AppConfig>,
) -> AppResult<Vec<FoundModelRow>> {
    found_models(&state, &config).await
}

/// Adds found models to the library, in place, under their apps' names.
/// Only files the scan finds usable are added.
#[tauri::command]
pub async fn models_add_found(
    state: State<'_, AppState>,
    config: State<'_, AppConfig>,
    paths: Vec<String>,
) -> AppResult<u32> {
    let found = found_models(&state, &config).await?;
    let store = state.store()?;
    let mut added = 0;
    for path in &paths {
        let Some(m) = found.iter().find(|m| &m.path == path) else {
            return Err(AppError::new(ErrorKind::NotFound, format!("{path} is not a model found on this computer")));
        };
        if let Some(reason) = &m.unusable {
            return Err(AppError::new(ErrorKind::UnsupportedModel, format!("{} cannot be added: {reason}", m.name)));
        }
        store.add_model(&m.path, &m.name, m.size as i64, &m.app)?;
        added += 1;
    }
    Ok(added)
}
