//! `hearth-cli replay`: an exported reply record run again from a cold
//! cache, token by token, by the worker's replay (the file read and checked
//! here, the model, its hash and the tokens there).

use std::path::Path;

use hearth_engine::file_hash::ids_sha256;
use hearth_engine::EngineError;
use hearth_store::{ConversationSettings, ReplayExport};
use serde_json::json;

use crate::local::{Ask, LocalWorker};
use crate::{CliResult, ModelArgs};

pub fn run(model: &ModelArgs, record_path: &Path) -> CliResult {
    let bad = |reason: String| EngineError::InvalidSetting { field: "record", reason };
    let text =
        std::fs::read_to_string(record_path).map_err(|e| bad(format!("cannot read {}: {e}", record_path.display())))?;
    let export: ReplayExport = serde_json::from_str(&text)
        .map_err(|e| bad(format!("{} is not a reply record: {e}", record_path.display())))?;
    if export.format != ReplayExport::FORMAT || export.version > ReplayExport::VERSION {
        return Err(bad(format!(
            "{} is format {:?} version {}, not a {} record this build reads",
            record_path.display(),
            export.format,
            export.version,
            ReplayExport::FORMAT
        ))
        .into());
    }
    let record = &export.record;
    if ids_sha256(&export.prompt_ids) != record.prompt_sha256 {
        return Err(bad("the prompt ids are not the ones the record names".into()).into());
    }
    let mut args = model.clone();
    if args.model.is_none() {
        args.model = Some(record.model_path.clone().into());
    }
    // The worker's replay, as the app's "Replay": the recorded sampler,
    // seed and passes over this prompt, on a cold cache.
    let local = LocalWorker::open(&args, hearth_engine::Kernels::Hearth)?;
    let mut ask = Ask::ids(export.prompt_ids.clone(), ConversationSettings::default());
    ask.replay = Some(record.clone());
    let outcome = local.reply(ask, |_, _| {})?.replayed.ok_or("the worker did not replay the record")?;
    println!(
        "{}",
        json!({
            "matched": outcome.matched,
            "compared": outcome.compared,
            "recorded": outcome.recorded,
            "first_difference": outcome.first_difference,
            "processed_tokens": outcome.processed_tokens,
            "notes": outcome.notes,
        })
    );
    if !outcome.matched {
        std::process::exit(1);
    }
    Ok(())
}
