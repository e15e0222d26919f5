//! `score` and `perplexity`: log-probabilities at every position of a token
//! sequence, for comparing Hearth's logits with llama.cpp's on the same ids.

use std::io::{BufWriter, Read, Write};
use std::path::Path;

use hearth_engine::{Engine, EngineError};
use serde_json::json;

/// Writes the log-softmax at every position of the ids in `ids_file` (a
/// JSON array) to `out` as an f32 `.npy` array of shape `[positions, vocab]`.
pub fn score(engine: &Engine, ids_file: &Path, out: &Path) -> Result<(), EngineError> {
    let text =
        std::fs::read_to_string(ids_file).map_err(|source| EngineError::Io { path: ids_file.to_path_buf(), source })?;
    let ids: Vec<u32> = serde_json::from_str(&text).map_err(|e| {
        EngineError::setting("ids-file", format!("{}: not a JSON array of token ids: {e}", ids_file.display()))
    })?;
    if ids.is_empty() {
        return Err(EngineError::setting("ids-file", "holds no ids"));
    }
    let model = engine.model();
    if ids.len() > model.config().context_length {
        return Err(EngineError::PromptTooLong { tokens: ids.len(), context: model.config().context_length });
    }
    let mut cache = model.new_cache(ids.len());
    let mut logits = model.logits_at_every_position(&ids, &mut cache)?;
    let vocab = model.vocab_size();
    logits.chunks_exact_mut(vocab).for_each(log_softmax);
    write_npy(out, &logits, ids.len(), vocab)
}

/// Perplexity over `file` as llama.cpp's `perplexity` computes it: the text
/// (with BOS where the model wants one) in chunks of `ctx` tokens, each
/// run from an empty cache with its first token replaced by BOS, scoring
/// the next-token log-probabilities of each chunk's second half. With
/// `kl_base` (log-probabilities at those same positions, `[positions,
/// vocab]`), also the mean KL divergence from the base, top-1 agreement,
/// and the largest difference in the actual next token's log-probability.
pub fn perplexity(
    engine: &Engine,
    file: &Path,
    ctx: usize,
    kl_base: Option<&Path>,
    as_json: bool,
) -> Result<(), EngineError> {
    let text = std::fs::read_to_string(file).map_err(|source| EngineError::Io { path: file.to_path_buf(), source })?;
    if ctx < 4 {
        return Err(EngineError::setting("ctx", "must be at least 4"));
    }
    let tok = engine.tokenizer();
    let tokens = tok.encode(&text, true, false)?;
    let chunks = tokens.len() / ctx;
    if chunks == 0 {
        return Err(EngineError::setting(
            "file",
            format!("has {} tokens, fewer than one chunk of {ctx}", tokens.len()),
        ));
    }
    let model = engine.model();
    let vocab = model.vocab_size();
    let base = kl_base.map(read_npy).transpose()?;
    let first = ctx / 2;
    let scored_per_chunk = ctx - 1 - first;
    if let Some((rows, cols, _)) = &base {
        if *cols != vocab || *rows != chunks * scored_per_chunk {
            return Err(EngineError::setting(
                "kl-base",
                format!("has shape [{rows}, {cols}], expected [{}, {vocab}]", chunks * scored_per_chunk),
            ));
        }
    }
    let (mut nll, mut count) = (0f64, 0usize);
    let (mut kl_sum, mut agree, mut max_diff) = (0f64, 0usize, 0f64);
    for c in 0..chunks {
        let mut ids = tokens[c * ctx..(c + 1) * ctx].to_vec();
        if tok.add_bos() {
            if let Some(bos) = tok.bos() {
                ids[0] = bos;
            }
        }
        let mut cache = model.new_cache(ctx);
        let mut logits = model.logits_at_every_position(&ids, &mut cache)?;
        for (j, row) in logits.chunks_exact_mut(vocab).enumerate().take(ctx - 1).skip(first) {
            log_softmax(row);
            let next = tokens[c * ctx + j + 1] as usize;
            nll -= row[next] as f64;
            count += 1;
            if let Some((_, _, b)) = &base {
                let i = c * scored_per_chunk + (j - first);
                let brow = &b[i * vocab..(i + 1) * vocab];
                kl_sum += brow
                    .iter()
                    .zip(row.iter())
                    .map(
                        |(&p, &q)| {
                            if p.is_finite() && p > -80.0 {
                                (p as f64).exp() * (p as f64 - q as f64)
                            } else {
                                0.0
                            }
                        },
                    )
                    .sum::<f64>();
                agree += (argmax(brow) == argmax(row)) as usize;
                max_diff = max_diff.max((brow[next] as f64 - row[next] as f64).abs());
            }
        }
        if !as_json {
            eprint!("[{}]{:.4} ", c + 1, (nll / count as f64).exp());
        }
    }
    let ppl = (nll / count as f64).exp();
    let mut report =
        json!({ "tokens": tokens.len(), "ctx": ctx, "chunks": chunks, "scored": count, "perplexity": ppl });
    if base.is_some() {
        report["mean_kl"] = json!(kl_sum / count as f64);
        report["top1_agreement"] = json!(agree as f64 / count as f64);
        report["max_logprob_diff"] = json!(max_diff);
    }
    if as_json {
        println!("{report}");
    } else {
        eprintln!();
        println!("perplexity {ppl:.4} over {count} positions ({chunks} chunks of {ctx})");
        if base.is_some() {
            println!(
                "mean KL {:.6}, top-1 agreement {:.2}%, largest log-prob difference {:.4}",
                kl_sum / count as f64,
                100.0 * agree as f64 / count as f64,
                max_diff
            );
        }
    }
    Ok(())
}

fn argmax(x: &[f32]) -> usize {
    x.iter().enumerate().fold((0, f32::NEG_INFINITY), |(bi, bv), (i, &v)| if v > bv { (i, v) } else { (bi, bv) }).0
}

/// In place, with the sum in f64.
fn log_softmax(x: &mut [f32]) {
    let max = x.iter().fold(f32::NEG_INFINITY, |a, &v| a.max(v));
    let sum: f64 = x.iter().map(|&v| ((v - max) as f64).exp()).sum();
    let lse = max as f64 + sum.ln();
    x.iter_mut().for_each(|v| *v = (*v as f64 - lse) as f32);
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> EngineError + '_ {
    move |source| EngineError::Io { path: path.to_path_buf(), source }
}

fn write_npy(path: &Path, data: &[f32], rows: usize, cols: usize) -> Result<(), EngineError> {
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({rows}, {cols}), }}");
    // Magic (6) + version (2) + length (2) + header, padded to 64 with a final newline.
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut f = BufWriter::new(std::fs::File::create(path).map_err(io(path))?);
    f.write_all(b"\x93NUMPY\x01\x00").map_err(io(path))?;
    f.write_all(&(header.len() as u16).to_le_bytes()).map_err(io(path))?;
    f.write_all(header.as_bytes()).map_err(io(path))?;
    for v in data {
        f.write_all(&v.to_le_bytes()).map_err(io(path))?;
    }
    f.flush().map_err(io(path))
}

/// A 2-D little-endian f32 `.npy` array: (rows, cols, values).
fn read_npy(path: &Path) -> Result<(usize, usize, Vec<f32>), EngineError> {
    let bad = |why: &str| EngineError::setting("kl-base", format!("{}: {why}", path.display()));
    let mut bytes = Vec::new();
    std::fs::File::open(path).map_err(io(path))?.read_to_end(&mut bytes).map_err(io(path))?;
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(bad("not a .npy file"));
    }
    let (hlen, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize, 12),
        _ => return Err(bad("unknown .npy version")),
    };
    let header = std::str::from_utf8(bytes.get(start..start + hlen).ok_or_else(|| bad("truncated header"))?)
        .map_err(|_| bad("header is not text"))?;
    if !header.contains("'<f4'") || header.contains("'fortran_order': True") {
        return Err(bad("must be a C-order little-endian float32 array"));
    }
    let shape = header.split("'shape': (").nth(1).and_then(|s| s.split(')').next()).ok_or_else(|| bad("no shape"))?;
    let dims: Vec<usize> = shape
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().map_err(|_| bad("bad shape")))
        .collect::<Result<_, _>>()?;
    let &[rows, cols] = dims.as_slice() else { return Err(bad("must be two-dimensional")) };
    let data = &bytes[start + hlen..];
    if Some(data.len()) != rows.checked_mul(cols).and_then(|n| n.checked_mul(4)) {
        return Err(bad("data does not match the shape"));
    }
    Ok((rows, cols, data.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()))
}
