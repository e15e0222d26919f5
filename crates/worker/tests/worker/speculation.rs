//! Speculative decoding through the worker: two conversations whose
//! replies draft, in passes they share (`advance_all`), write what each
//! writes alone without drafts, and each reply's stats say what its drafts did.

use hearth_store::SpeculationMode;

use super::*;

fn settings(speculation: SpeculationMode) -> ConversationSettings {
    ConversationSettings { speculation, draft_tokens: 6, ..greedy(60) }
}

#[test]
fn two_conversations_drafting_in_shared_passes_write_what_each_writes_alone_without() {
    let (_dir, store, worker) = start();
    let asks = [
        "Repeat exactly, twice: the quick brown fox jumps over the lazy dog near the river bank.",
        "Copy this list: apples, pears, plums, cherries, apples, pears, plums, cherries.",
    ];
    let run_all = |speculation: SpeculationMode| {
        let receivers: Vec<_> = asks
            .iter()
            .map(|ask| {
                let c = store.create_conversation().unwrap();
                let r = reply_row(&store, c.id, ask);
                let (j, rx) = job(c.id, r, vec![ChatMessage::user(*ask)], settings(speculation));
                worker.enqueue(j).unwrap();
                rx
            })
            .collect();
        receivers.iter().map(|rx| finished(&collect(rx))).collect::<Vec<_>>()
    };
    let drafting = run_all(SpeculationMode::Ngram);
    let plain = run_all(SpeculationMode::Off);
    let mut accepted = 0;
    for ((d_reason, d), (p_reason, p)) in drafting.iter().zip(&plain) {
        assert_eq!(d_reason, p_reason);
        let tokens = |s: &hearth_store::ReplyStats| s.replay.as_ref().unwrap().tokens.clone();
        assert_eq!(tokens(d), tokens(p), "the same tokens with drafts as without");
        let drafts = d.drafts.expect("drafting replies report their drafts");
        assert_eq!((drafts.mode, drafts.draft_tokens), (SpeculationMode::Ngram, 6));
        assert!(drafts.accepted <= drafts.drafted);
        accepted += drafts.accepted;
        assert_eq!(p.drafts, None, "no drafts reported with speculation off");
    }
    assert!(accepted > 0, "replies that copy their prompt take drafts");
}
