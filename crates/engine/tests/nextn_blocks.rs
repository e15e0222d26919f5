//! Files that carry a multi-token-prediction block after their layers, as
//! Qwen 3.5/3.6's and GLM-4.5's converters write them by default (and
//! GLM-4.7-Flash's, a `deepseek2` file)
//! (`nextn_predict_layers` = 1, `blk.{n_layer}.nextn.*`): they open, and
//! reply exactly as the same weights without the block, at the same cost.
//! The head runs beside the model only for a conversation that drafts with
//! it (`tests/mtp.rs`), its keys and values a layer more of that cache.

mod common;

use common::{tiny, Family, TinySpec};
use hearth_engine::{Engine, KvCache, Model};

fn logits_of(m: &Model, prompt: &[u32]) -> Vec<Vec<f32>> {
    let mut cache: KvCache = m.new_cache(256);
    let mut out = vec![m.forward(&[prompt.to_vec()], &mut cache).unwrap().to_vec2::<f32>().unwrap().remove(0)];
    for t in [5, 9, 13] {
        out.push(m.forward(&[vec![t]], &mut cache).unwrap().to_vec2::<f32>().unwrap().remove(0));
    }
    out
}

#[test]
fn a_file_with_an_mtp_block_replies_as_the_same_weights_without_it() {
    let prompt: Vec<u32> = (0..40).map(|i| (3 + (i * 37) % 300) as u32).collect();
    for family in [Family::Qwen35, Family::Qwen35Moe, Family::Glm4Moe, Family::Deepseek2] {
        let (_a, plain) = tiny(&TinySpec::new(family));
        let (_b, with) = tiny(&TinySpec { mtp: true, ..TinySpec::new(family) });
        let facts = |path| hearth_engine::ModelFacts::read(path).unwrap();
        assert_eq!(facts(&with).n_layers, facts(&plain).n_layers + 1, "{family:?}: the file has the block");
        let head = true;
        let kv = |path| facts(path).kv_bytes_per_token;
        let (plain_path, with_path) = (plain.clone(), with.clone());
        let (plain, with) = (Engine::open(&plain).unwrap(), Engine::open(&with).unwrap());
        let (p, w) = (plain.model(), with.model());
        assert_eq!(w.has_mtp_head(), head, "{family:?}");
        assert_eq!(w.config().n_layers, p.config().n_layers, "{family:?}: the block is not a layer");
        assert_eq!(kv(&with_path), kv(&plain_path), "{family:?}: the memory planned for the cache");
        assert_eq!(w.new_cache(64).bytes_per_position(), p.new_cache(64).bytes_per_position(), "{family:?}");
        assert_eq!(w.weight_bytes_per_token(), p.weight_bytes_per_token(), "{family:?}: nor read per token");
        // A cache the head runs for keeps one full-attention layer's more.
        let mut drafting = w.new_cache(64);
        let c = w.config();
        let head_kv = if head { 2 * (c.kv_width(c.n_layers) + c.value_width(c.n_layers)) } else { 0 };
        assert_eq!(drafting.start_mtp(), head, "{family:?}");
        assert_eq!(drafting.bytes_per_position(), p.new_cache(64).bytes_per_position() + head_kv, "{family:?}");
        assert!(logits_of(w, &prompt) == logits_of(p, &prompt), "{family:?}: the same logits, bit for bit");
        // Its weights load when a conversation first drafts with it.
        assert!(!w.mtp_head_loaded(), "{family:?}: not loaded before it is asked for");
        w.forward(std::slice::from_ref(&prompt), &mut drafting).unwrap();
        assert!(w.mtp_head_loaded(), "{family:?}");
    }
}
