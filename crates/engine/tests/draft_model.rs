//! Speculative decoding with a draft model (`draft_model.rs`): replies are
//! plain decoding's token for token, the draft model's session is kept with
//! the conversation's (in memory and on disk) so the next turn drafts after
//! reading only its new tokens, and a model that cannot draft is refused
//! with the reason.

mod common;

use std::sync::Arc;

use common::{tiny, Family, TinySpec};
use hearth_engine::{
    session_file, DraftModel, Engine, FinishReason, GenerationConfig, SamplingParams, Session, Speculation, TurnOutput,
};

/// A prompt that the tiny models continue in many ways.
fn prompt(n: usize) -> Vec<u32> {
    (0..n).map(|i| (3 + (i * 37) % 300) as u32).collect()
}

/// A target and a draft model of the same weights at another precision:
/// they agree on most greedy tokens, as a quantized copy of a model does.
fn pair() -> ((tempfile::TempDir, Engine), (tempfile::TempDir, Arc<Engine>)) {
    use candle_core::quantized::GgmlDType;
    let spec = |dtype| TinySpec { dtype, ..TinySpec::new(Family::Llama) };
    let (target_dir, target) = tiny(&spec(GgmlDType::F16));
    let (draft_dir, draft) = tiny(&spec(GgmlDType::Q8_0));
    let target = Engine::open(&target).unwrap();
    let draft = Arc::new(Engine::open(&draft).unwrap());
    ((target_dir, target), (draft_dir, draft))
}

fn config(engine: &Engine, sampling: SamplingParams, draft: Option<&DraftModel>) -> GenerationConfig {
    let mut c = engine.generation_config(sampling, 40);
    c.end_tokens.clear();
    if let Some(d) = draft {
        c.speculation = Speculation::Draft { max_draft: 6 };
        c.draft_model = Some(d.clone());
    }
    c
}

fn reply(engine: &Engine, session: Session, prompt: &[u32], config: GenerationConfig) -> (TurnOutput, Session) {
    let mut turn = session.into_turn(engine.model(), prompt.to_vec(), config).map_err(|(_, e)| e).unwrap();
    common::run_to_end(engine, &mut turn);
    let ended = turn.end();
    (ended.output.unwrap(), ended.session)
}

/// The pass of the draft session that starts at position 0: how many of
/// the conversation's first tokens it read in one go.
fn first_read(session: &Session) -> u32 {
    let (_, draft) = session.draft().expect("the draft model's session is kept with the conversation's");
    draft.passes().each().find(|&(start, _, _)| start == 0).map_or(0, |(_, _, kept)| kept)
}

#[test]
fn replies_drafted_by_a_draft_model_are_plain_ones_and_its_session_carries_over_turns_and_disk() {
    let ((dir, target), (_draft_dir, draft_engine)) = pair();
    target.hash_file(&|| false).unwrap();
    draft_engine.hash_file(&|| false).unwrap();
    let draft = DraftModel::new(&target, draft_engine.clone()).unwrap().with_min_probability(0.0);
    let first = prompt(50);
    let greedy = |d| config(&target, SamplingParams::greedy(), d);

    // Turn 1, cold: the same tokens with drafts as without.
    let (plain1, plain_session) = reply(&target, target.new_session(Some(512)), &first, greedy(None));
    let (spec1, session) = reply(&target, target.new_session(Some(512)), &first, greedy(Some(&draft)));
    assert_eq!(spec1.sequences[0].tokens, plain1.sequences[0].tokens);
    assert_eq!(spec1.sequences[0].finish, FinishReason::MaxTokens);
    let s = &spec1.stats;
    assert!(s.drafted_tokens > 0 && s.accepted_tokens > 0, "the draft model drafts and is right: {s:?}");
    assert!(s.accepted_tokens * 2 > s.drafted_tokens, "a quantized copy mostly agrees: {s:?}");
    assert_eq!(session.passes(), plain_session.passes(), "the target's cache is computed as plainly");
    assert_eq!(first_read(&session), first.len() as u32, "the prompt is read once, in one pass");

    // Turn 2 on the warm session, and on both sessions saved and restored:
    // the draft model reads only what is new.
    let mut next: Vec<u32> = first.iter().chain(&plain1.sequences[0].tokens).copied().collect();
    next.extend(prompt(20).iter().map(|t| t + 1));
    let (plain2, _) = reply(&target, plain_session, &next, greedy(None));
    let save = |engine: &Engine, s: &Session, name: &str| {
        let file = dir.path().join(name);
        let identity = engine.cache_identity(512).unwrap();
        session_file::write(&file, &identity, s).unwrap();
        (file, identity)
    };
    let (main_file, main_id) = save(&target, &session, "main.session");
    let (draft_file, draft_id) = save(&draft_engine, session.draft().unwrap().1, "draft.session");
    let mut restored = session_file::read(&main_file, &main_id, target.model()).unwrap().session;
    restored.set_draft(draft.path(), session_file::read(&draft_file, &draft_id, draft_engine.model()).unwrap().session);
    for (which, s) in [("warm", session), ("restored", restored)] {
        let (spec2, after) = reply(&target, s, &next, greedy(Some(&draft)));
        assert_eq!(spec2.sequences[0].tokens, plain2.sequences[0].tokens, "{which}");
        assert!(spec2.stats.accepted_tokens > 0, "{which}");
        assert_eq!(first_read(&after), first.len() as u32, "{which}: the first turn's read is kept, not redone");
    }

    // A session kept with another draft model's file is not used: the
    // draft reads the conversation afresh.
    let (_, mut other) = reply(&target, target.new_session(Some(512)), &first, greedy(Some(&draft)));
    let kept = other.draft().unwrap().1.clone();
    other.set_draft(std::path::Path::new("another.gguf"), kept);
    let (again, after) = reply(&target, other, &next, greedy(Some(&draft)));
    assert_eq!(again.sequences[0].tokens, plain2.sequences[0].tokens);
    assert_eq!(first_read(&after), next.len() as u32, "read whole, in one pass");
}

#[test]
fn a_regenerated_reply_and_a_prompt_longer_than_the_draft_models_context_reply_as_plain_ones() {
    use candle_core::quantized::GgmlDType;
    let ((_dir, target), (_d, draft_engine)) = pair();
    let draft = DraftModel::new(&target, draft_engine).unwrap().with_min_probability(0.0);
    let greedy = |d| config(&target, SamplingParams::greedy(), d);
    let first = prompt(60);
    let (plain, _) = reply(&target, target.new_session(Some(512)), &first, greedy(None));
    // The same prompt again on the session that replied (a regeneration):
    // the draft session's reply tokens are cut back, as the target's are.
    let (_, session) = reply(&target, target.new_session(Some(512)), &first, greedy(Some(&draft)));
    let (again, after) = reply(&target, session, &first, greedy(Some(&draft)));
    assert_eq!(again.sequences[0].tokens, plain.sequences[0].tokens);
    let (_, kept) = after.draft().unwrap();
    assert!(kept.tokens().len() <= after.tokens().len() && after.tokens().starts_with(kept.tokens()));

    // A draft model whose context (64) the prompt outgrows drafts nothing
    // itself, and the reply is still the plain one.
    let (_s, short) = tiny(&TinySpec { dtype: GgmlDType::Q8_0, context: 64, ..TinySpec::new(Family::Llama) });
    let short = DraftModel::new(&target, Arc::new(Engine::open(&short).unwrap())).unwrap().with_min_probability(0.0);
    let long = prompt(100);
    let (plain, _) = reply(&target, target.new_session(Some(512)), &long, greedy(None));
    let (out, session) = reply(&target, target.new_session(Some(512)), &long, greedy(Some(&short)));
    assert_eq!(out.sequences[0].tokens, plain.sequences[0].tokens);
    assert_eq!(out.sequences[0].draft_failure, None, "not a failure: the draft model just cannot see that far");
    assert!(session.draft().is_none(), "no draft session kept");
}

#[test]
fn seeded_variants_drafted_by_a_draft_model_are_the_plain_runs() {
    let ((_dir, target), (_d, draft_engine)) = pair();
    let draft = DraftModel::new(&target, draft_engine).unwrap().with_min_probability(0.0);
    let first = prompt(40);
    let sampled = SamplingParams { temperature: 0.6, top_k: Some(10), seed: 3, ..SamplingParams::default() };
    let run = |d: Option<&DraftModel>| {
        let mut turn = target
            .new_session(Some(512))
            .into_turn(target.model(), first.clone(), config(&target, sampled.clone(), d))
            .map_err(|(_, e)| e)
            .unwrap();
        turn.set_variants(4).unwrap();
        common::run_to_end(&target, &mut turn);
        turn.end()
    };
    let (plain, spec) = (run(None).output.unwrap(), run(Some(&draft)));
    let out = spec.output.unwrap();
    for b in 0..4 {
        assert_eq!(out.sequences[b].tokens, plain.sequences[b].tokens, "variant {b}");
    }
    assert!(out.stats.accepted_tokens > 0);
    // Every variant's session keeps its own draft session.
    assert!(spec.others.iter().all(|s| s.draft().is_some()) && spec.session.draft().is_some());
}

#[test]
fn a_model_that_cannot_draft_is_refused_with_the_reason() {
    let (_t, target) = tiny(&TinySpec::new(Family::Llama));
    let target = Engine::open(&target).unwrap();
    let refused = |spec: TinySpec| {
        let (_d, path) = tiny(&spec);
        let draft = Arc::new(Engine::open(&path).unwrap());
        DraftModel::new(&target, draft).unwrap_err().to_string()
    };
    let vocab = refused(TinySpec::gemma4(false));
    for part in ["draft_model", "tiny-gemma4.gguf (Gemma 4)", "tiny-llama.gguf (Llama)", "token 0 is \"<pad>\""] {
        assert!(vocab.contains(part), "{vocab}");
    }
    let recurrent = refused(TinySpec::new(Family::Qwen35));
    assert!(recurrent.contains("(Qwen 3.5)") && recurrent.contains("recurrent layers"), "{recurrent}");
    // Drafting with a draft model needs one.
    let mut c = target.generation_config(SamplingParams::greedy(), 4);
    c.speculation = Speculation::Draft { max_draft: 4 };
    let e = target.new_session(Some(64)).into_turn(target.model(), prompt(5), c).map_err(|(_, e)| e).err();
    assert!(e.is_some_and(|e| e.to_string().contains("draft_model")));
    assert!(Speculation::parse("draft", 33).is_err());
    assert_eq!(Speculation::parse("draft", 4).unwrap(), Speculation::Draft { max_draft: 4 });
}
