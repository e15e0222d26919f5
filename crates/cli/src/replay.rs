//! `hearth-cli replay`: an exported reply record run again from a cold
//! cache, token by token.

use std::path::Path;

use hearth_engine::file_hash::ids_sha256;
use hearth_engine::sampler_loop::PAD;
use hearth_engine::{EngineError, Pass, Passes, SamplingParams};
use hearth_store::ReplayExport;
use serde_json::json;

use crate::{open, ModelArgs};

pub fn run(model: &ModelArgs, record_path: &Path) -> Result<(), EngineError> {
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
        )));
    }
    let record = &export.record;
    if ids_sha256(&export.prompt_ids) != record.prompt_sha256 {
        return Err(bad("the prompt ids are not the ones the record names".into()));
    }
    let mut args = model.clone();
    if args.model.is_none() {
        args.model = Some(record.model_path.clone().into());
    }
    let engine = open(&args)?;
    let sha = engine.hash_file(&|| false)?.unwrap_or_default();
    match &record.model_sha256 {
        Some(recorded) if *recorded == sha => {}
        Some(recorded) => {
            return Err(bad(format!(
                "the record was written by a model file with SHA-256 {recorded}; {} has {sha}",
                engine.path().display()
            )))
        }
        None => return Err(bad("the record does not name its model file's hash".into())),
    }
    if record.passes.is_empty() {
        return Err(bad("the record was written before Hearth recorded how its prompt was computed, so it cannot be run again exactly".into()));
    }
    let passes = Passes::try_from(record.passes.iter().map(|&p| Pass::from(p)).collect::<Vec<_>>())?;
    let sampling = SamplingParams {
        temperature: record.temperature,
        top_k: (record.top_k > 0).then_some(record.top_k as usize),
        top_p: record.top_p,
        min_p: record.min_p,
        repeat_penalty: record.repeat_penalty,
        penalty_window: record.penalty_window as usize,
        seed: record.seed as u64 + record.variant as u64,
        ..SamplingParams::default()
    };
    let mut config = engine.generation_config(sampling, record.max_new_tokens as usize);
    config.stop_strings = record.stop_strings.clone();
    // As the app asks when it records: the same sampling path.
    config.top_logprobs = hearth_store::KEPT_ALTERNATIVES;
    let mut session = engine.new_session(Some(record.context_length as usize));
    let mut turn =
        session.start_replay(engine.model(), engine.tokenizer(), &export.prompt_ids, &passes, config, &mut |_| true)?;
    let processed = turn.stats().processed_tokens;
    let mut produced = Vec::new();
    while let Some(step) = turn.step()? {
        produced.extend(step.iter().filter(|e| e.sequence == 0 && e.token != PAD).map(|e| e.token));
        if produced.len() > record.tokens.len() || produced.iter().zip(&record.tokens).any(|(a, b)| a != b) {
            break;
        }
    }
    drop(turn);
    let first_difference = produced
        .iter()
        .zip(&record.tokens)
        .position(|(a, b)| a != b)
        .or_else(|| (produced.len() != record.tokens.len()).then(|| produced.len().min(record.tokens.len())));
    let device = hearth_engine::device::describe(engine.model().device());
    let mut notes = Vec::new();
    if record.engine_build != hearth_engine::BUILD_ID {
        notes.push(format!(
            "recorded by engine build {}, replayed by {}",
            record.engine_build,
            hearth_engine::BUILD_ID
        ));
    }
    if record.device != device {
        notes.push(format!("recorded on {}, replayed on {device}", record.device));
    }
    let matched = first_difference.is_none();
    println!(
        "{}",
        json!({
            "matched": matched,
            "compared": produced.len(),
            "recorded": record.tokens.len(),
            "first_difference": first_difference,
            "processed_tokens": processed,
            "notes": notes,
        })
    );
    if !matched {
        std::process::exit(1);
    }
    Ok(())
}
