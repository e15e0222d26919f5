//! A hybrid's recurrent layers (`ssm.*`): their shape, and which layers they are.

use crate::error::Result;
use crate::gguf::GgufFile;
use crate::model::config::RecurrentConfig;

/// A hybrid's recurrent layers: `attention.recurrent_layers` where the file
/// has it, else every layer but each `full_attention_interval`-th.
pub(super) fn recurrent(
    file: &GgufFile,
    key: &dyn Fn(&str) -> String,
    blocks: usize,
    n_layers: usize,
) -> Result<RecurrentConfig> {
    let need = |k: &str| -> Result<usize> { Ok(file.u32(&key(k))? as usize) };
    let (conv_kernel, head_dim, k_heads, v_heads) =
        (need("ssm.conv_kernel")?, need("ssm.state_size")?, need("ssm.group_count")?, need("ssm.time_step_rank")?);
    let inner = need("ssm.inner_size")?;
    if conv_kernel < 2 || head_dim == 0 || k_heads == 0 || v_heads == 0 || v_heads % k_heads != 0 {
        return Err(file.corrupt(format!(
            "recurrent layers of kernel {conv_kernel}, heads of {head_dim}, {k_heads} key heads and {v_heads} value heads"
        )));
    }
    if inner != head_dim * v_heads {
        return Err(file.corrupt(format!(
            "{} is {inner}, but {} × {} is {}",
            key("ssm.inner_size"),
            key("ssm.state_size"),
            key("ssm.time_step_rank"),
            head_dim * v_heads
        )));
    }
    let layers = match file.metadata().get(&key("attention.recurrent_layers")) {
        Some(candle_core::quantized::gguf_file::Value::Array(flags)) => {
            let flags: Vec<bool> = flags
                .iter()
                .map(|v| match v {
                    candle_core::quantized::gguf_file::Value::Bool(b) => Some(*b),
                    _ => None,
                })
                .collect::<Option<_>>()
                .ok_or_else(|| {
                    file.corrupt(format!("{} is not a list of booleans", key("attention.recurrent_layers")))
                })?;
            if flags.len() != blocks {
                return Err(file.corrupt(format!(
                    "{} has {} entries for {blocks} blocks",
                    key("attention.recurrent_layers"),
                    flags.len()
                )));
            }
            flags[..n_layers].to_vec()
        }
        _ => {
            let interval = file.u32_opt(&key("full_attention_interval"))?.unwrap_or(4) as usize;
            if interval == 0 {
                return Err(file.corrupt(format!("{} is 0", key("full_attention_interval"))));
            }
            (0..n_layers).map(|i| (i + 1) % interval != 0).collect()
        }
    };
    Ok(RecurrentConfig { conv_kernel, head_dim, k_heads, v_heads, layers, short_conv: None })
}
