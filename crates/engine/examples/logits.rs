//! Prints the top logits after a token sequence, from Hearth and from
//! candle-transformers' quantized_llama, for numeric comparisons with llama.cpp.
//! Usage: cargo run --example logits -- MODEL ID,ID,...

use candle_core::{Device, Tensor};

fn top(l: &[f32]) -> Vec<(usize, f32)> {
    let mut v: Vec<(usize, f32)> = l.iter().copied().enumerate().collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    v.truncate(4);
    v
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let ids: Vec<u32> = args[2].split(',').map(|s| s.parse().unwrap()).collect();
    let engine = hearth_engine::Engine::open(&args[1]).unwrap();
    let mut cache = engine.model().new_cache(4096);
    let ours: Vec<f32> =
        engine.model().forward(std::slice::from_ref(&ids), &mut cache).unwrap().to_vec2::<f32>().unwrap().remove(0);
    println!("hearth one chunk: {:?}", top(&ours));
    let mut cache = engine.model().new_cache(4096);
    engine.model().forward(&[ids[..ids.len() - 2].to_vec()], &mut cache).unwrap();
    engine.model().forward(&[vec![ids[ids.len() - 2]]], &mut cache).unwrap();
    let inc: Vec<f32> =
        engine.model().forward(&[vec![ids[ids.len() - 1]]], &mut cache).unwrap().to_vec2::<f32>().unwrap().remove(0);
    println!("hearth steps:     {:?}", top(&inc));
    let mut cache = engine.model().new_cache(4096);
    let n = ids.len() - 3;
    engine.model().forward(&[ids[..n].to_vec()], &mut cache).unwrap();
    let mut last = Vec::new();
    for &t in &ids[n..] {
        last = engine.model().forward(&[vec![t]], &mut cache).unwrap().to_vec2::<f32>().unwrap().remove(0);
    }
    println!("hearth 3 steps:   {:?}", top(&last));
    for n in 1..ids.len() {
        let mut cache = engine.model().new_cache(4096);
        engine.model().forward(&[ids[..n].to_vec()], &mut cache).unwrap();
        let mut last = Vec::new();
        for &t in &ids[n..] {
            last = engine.model().forward(&[vec![t]], &mut cache).unwrap().to_vec2::<f32>().unwrap().remove(0);
        }
        println!("chunk {n:3} + {} steps: {:?}", ids.len() - n, &top(&last)[..2]);
    }
    let mut f = std::fs::File::open(&args[1]).unwrap();
    let ct = candle_core::quantized::gguf_file::Content::read(&mut f).unwrap();
    let mut r =
        candle_transformers::models::quantized_llama::ModelWeights::from_gguf(ct, &mut f, &Device::Cpu).unwrap();
    let x = Tensor::new(ids.as_slice(), &Device::Cpu).unwrap().unsqueeze(0).unwrap();
    let theirs: Vec<f32> = r.forward(&x, 0).unwrap().flatten_all().unwrap().to_vec1().unwrap();
    println!("candle:           {:?}", top(&theirs));
}
