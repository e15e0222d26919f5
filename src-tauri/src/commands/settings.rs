use hearth_store::{ConversationSettings, FieldError, Preset};
use tauri::State;
use ts_rs::TS;

use crate::error::{AppError, AppResult, ErrorKind};
use crate::state::AppState;

/// Settings as the UI sends them. They are taken as JSON rather than as the
/// typed struct so that a value of the wrong type or past a field's range (a
/// number over `u32`, NaN sent as `null`) is a field error, not serde's; to
/// TypeScript they are `ConversationSettings`.
#[derive(serde::Deserialize, TS)]
#[serde(transparent)]
#[ts(export, export_to = "bindings/")]
pub struct SettingsInput(#[ts(as = "ConversationSettings")] serde_json::Value);

fn checked(settings: SettingsInput) -> AppResult<ConversationSettings> {
    ConversationSettings::from_json(settings.0).map_err(|errors| {
        let words: Vec<String> = errors.iter().map(|e| format!("{} {}", e.field, e.message)).collect();
        AppError::new(ErrorKind::InvalidSettings, words.join("; "))
    })
}

/// A preset as sent: its settings are checked like any others.
#[derive(serde::Deserialize, TS)]
#[ts(export, export_to = "bindings/")]
pub struct PresetInput {
    name: String,
    settings: SettingsInput,
}

#[tauri::command]
pub async fn settings_get(state: State<'_, AppState>, conversation_id: i64) -> AppResult<ConversationSettings> {
    Ok(state.store()?.conversation_settings(conversation_id)?)
}

/// Saves a conversation's settings; a reply already running keeps its own.
#[tauri::command]
pub async fn settings_set(state: State<'_, AppState>, conversation_id: i64, settings: SettingsInput) -> AppResult<()> {
    let settings = checked(settings)?;
    Ok(state.store()?.set_conversation_settings(conversation_id, &settings)?)
}

/// Every invalid field with its message; empty when all are valid.
#[tauri::command]
pub async fn settings_validate(settings: SettingsInput) -> AppResult<Vec<FieldError>> {
    Ok(ConversationSettings::from_json(settings.0).err().unwrap_or_default())
}

#[tauri::command]
pub async fn settings_defaults_get(state: State<'_, AppState>) -> AppResult<ConversationSettings> {
    Ok(state.store()?.default_settings()?)
}

#[tauri::command]
pub async fn settings_defaults_set(state: State<'_, AppState>, settings: SettingsInput) -> AppResult<()> {
    let settings = checked(settings)?;
    Ok(state.store()?.set_default_settings(&settings)?)
}

#[tauri::command]
pub async fn presets_list(state: State<'_, AppState>) -> AppResult<Vec<Preset>> {
    Ok(state.store()?.presets()?)
}

#[tauri::command]
pub async fn presets_save(state: State<'_, AppState>, preset: PresetInput) -> AppResult<Vec<Preset>> {
    let preset = Preset { settings: checked(preset.settings)?, name: preset.name };
    let store = state.store()?;
    store.save_preset(&preset)?;
    Ok(store.presets()?)
}

#[tauri::command]
pub async fn presets_delete(state: State<'_, AppState>, name: String) -> AppResult<Vec<Preset>> {
    let store = state.store()?;
    store.delete_preset(&name)?;
    Ok(store.presets()?)
}

/// Forgets every conversation's saved KV cache (memory and disk). The next
/// turn of each conversation prefills its history again.
#[tauri::command]
pub async fn caches_clear(state: State<'_, AppState>) -> AppResult<()> {
    state.worker.clear_caches();
    Ok(())
}

#[tauri::command]
pub async fn caches_budgets_get(state: State<'_, AppState>) -> AppResult<crate::worker::CacheBudgets> {
    Ok(state.worker.budgets())
}

/// Sets how much memory and disk conversation caches may use.
#[tauri::command]
pub async fn caches_budgets_set(state: State<'_, AppState>, budgets: crate::worker::CacheBudgets) -> AppResult<()> {
    budgets.validate()?;
    let json = serde_json::to_string(&budgets).map_err(|e| AppError::new(ErrorKind::Internal, e.to_string()))?;
    state.store()?.set_app_setting(crate::state::BUDGETS_KEY, &json)?;
    state.worker.set_budgets(budgets);
    Ok(())
}

/// The device setting: `auto` (Metal, then CUDA, then the CPU), `cpu`,
/// `cuda`, `cuda:N` or `metal`.
#[tauri::command]
pub async fn device_get(state: State<'_, AppState>) -> AppResult<String> {
    Ok(state.store()?.app_setting(crate::worker::DEVICE_KEY)?.unwrap_or_else(|| "auto".into()))
}

/// Changes the device and reopens the current model on it. A device this
/// build or machine cannot open is refused here, before anything changes.
#[tauri::command]
pub async fn device_set(state: State<'_, AppState>, device: String) -> AppResult<()> {
    let refused = |e: hearth_engine::EngineError| match e {
        hearth_engine::EngineError::InvalidSetting { reason, .. } => AppError::new(ErrorKind::InvalidSettings, reason),
        other => AppError::from(other),
    };
    let choice = device.parse::<hearth_engine::DeviceChoice>().map_err(refused)?;
    choice.open().map_err(refused)?;
    state.store()?.set_app_setting(crate::worker::DEVICE_KEY, &choice.to_string())?;
    if let crate::events::ModelStatus::Ready { path, .. } = state.worker.model_status() {
        state.worker.load_model(path.into());
    }
    Ok(())
}
