//! `bench --speculative MODE`: greedy decode with drafts against the same
//! reply without them, on one prompt, through the app's worker; the
//! replies must be the same tokens.

use hearth_engine::ChatMessage;
use hearth_store::{ConversationSettings, SpeculationMode};
use serde_json::json;

use crate::local::{Ask, LocalWorker};
use crate::CliResult;

/// What the speculative run is asked to do.
pub(crate) struct SpeculativeRun<'a> {
    pub mode: SpeculationMode,
    pub draft_tokens: u32,
    /// The draft model `SpeculationMode::Draft` drafts with.
    pub draft_model: Option<&'a str>,
    /// A chat message to reply to (through the model's template), in
    /// place of the bench's fixed token ids.
    pub prompt_text: Option<&'a str>,
}

/// The figures: each mode's best decode rate over `repeats` cold runs (the
/// two alternating), their ratio, and what the drafts did.
pub(crate) fn speculative_figures(
    local: &LocalWorker,
    run: &SpeculativeRun,
    prompt_ids: &[u32],
    gen_tokens: usize,
    repeats: usize,
) -> CliResult<serde_json::Value> {
    let settings = |speculation| ConversationSettings {
        temperature: 0.0,
        seed: Some(0),
        max_new_tokens: (gen_tokens + 1).min(u32::MAX as usize) as u32,
        speculation,
        draft_tokens: run.draft_tokens,
        draft_model: run.draft_model.map(str::to_string),
        ..ConversationSettings::default()
    };
    let ask = |speculation| match run.prompt_text {
        Some(text) => Ask::chat(vec![ChatMessage::user(text)], settings(speculation)),
        None => {
            let mut ask = Ask::ids(prompt_ids.to_vec(), settings(speculation));
            ask.request.ignore_end_tokens = true;
            ask
        }
    };
    local.settle()?;
    let (mut plain, mut drafted) = ((0.0f64, Vec::new()), (0.0f64, Vec::new(), None));
    for _ in 0..repeats.max(1) {
        for mode in [SpeculationMode::Off, run.mode] {
            local.forget_caches()?;
            let reply = local.reply(ask(mode), |_, _| {})?;
            let stats = &reply.stats[0];
            let tokens = stats.replay.as_ref().map(|r| r.tokens.clone()).unwrap_or_default();
            if mode == SpeculationMode::Off {
                plain = (plain.0.max(stats.tokens_per_s), tokens);
            } else {
                drafted = (drafted.0.max(stats.tokens_per_s), tokens, stats.drafts);
            }
        }
    }
    if plain.1 != drafted.1 {
        return Err(format!(
            "the reply with drafts differs from the plain one ({} and {} tokens)",
            drafted.1.len(),
            plain.1.len()
        )
        .into());
    }
    let drafts = drafted.2.unwrap_or_default();
    Ok(json!({
        "mode": run.mode.as_str(),
        "draft_tokens": run.draft_tokens,
        "tokens": plain.1.len(),
        "plain_decode_tokens_per_s": plain.0,
        "decode_tokens_per_s": drafted.0,
        "ratio": if plain.0 > 0.0 { drafted.0 / plain.0 } else { 0.0 },
        "drafted": drafts.drafted,
        "accepted": drafts.accepted,
        "acceptance": if drafts.drafted > 0 { drafts.accepted as f64 / drafts.drafted as f64 } else { 0.0 },
        "same_tokens": true,
    }))
}
