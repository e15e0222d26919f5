//! RoPE's metadata: `rope.scaling.*` (linear or YaRN) and the multi-section
//! rotation's `rope.dimension_sections`.

use crate::error::Result;
use crate::gguf::GgufFile;
use crate::model::config::YarnConfig;
use crate::model::families::{Family, YarnLogMultiplier};

/// `rope.scaling.*`: the factor positions are divided by, and YaRN's
/// parameters where the type is `yarn`, as llama.cpp reads them (the type
/// defaults to linear; a factor of 0 or none is no scaling).
pub(super) fn rope_scaling(
    file: &GgufFile,
    key: &dyn Fn(&str) -> String,
    context_length: usize,
    family: &Family,
) -> Result<(f32, Option<YarnConfig>)> {
    let kind = file.string_opt(&key("rope.scaling.type")).unwrap_or("linear").to_string();
    let factor_key = key("rope.scaling.factor");
    let factor = match file.f32_opt(&factor_key)? {
        Some(f) => Some(f),
        None => file.f32_opt(&key("rope.scale_linear"))?,
    };
    let yarn = kind == "yarn";
    match factor {
        Some(f) if !f.is_finite() || f < 0.0 || (yarn && f == 0.0) => {
            return Err(file.corrupt(format!(
                "{factor_key} is {f}; {} scaling needs a positive factor",
                if yarn { "YaRN" } else { "RoPE" }
            )))
        }
        _ => {}
    }
    let factor = factor.filter(|&f| f != 0.0).unwrap_or(1.0);
    match kind.as_str() {
        "none" => Ok((1.0, None)),
        "linear" => Ok((factor, None)),
        "yarn" => {
            let original =
                file.u32_opt(&key("rope.scaling.original_context_length"))?.map_or(context_length, |n| n as usize);
            if original == 0 {
                return Err(file.corrupt(format!("{} is 0", key("rope.scaling.original_context_length"))));
            }
            let attn = file.f32_opt(&key("rope.scaling.attn_factor"))?.unwrap_or(1.0);
            let (mut betas, mut log_mul) = ((32.0, 1.0), 0.0);
            if family.yarn_betas_from_file {
                betas.0 = file.f32_opt(&key("rope.scaling.yarn_beta_fast"))?.unwrap_or(betas.0);
                betas.1 = file.f32_opt(&key("rope.scaling.yarn_beta_slow"))?.unwrap_or(betas.1);
            }
            if family.yarn_log_multiplier != YarnLogMultiplier::Ignored {
                log_mul = file.f32_opt(&key("rope.scaling.yarn_log_multiplier"))?.unwrap_or(0.0);
                if family.yarn_log_multiplier == YarnLogMultiplier::ReadOverTenth {
                    // llama.cpp cancels the 0.1 its converter wrote in.
                    log_mul /= 0.1;
                }
            }
            if !(betas.0.is_finite() && betas.1.is_finite() && log_mul.is_finite()) {
                return Err(file.corrupt(format!(
                    "YaRN's betas ({}, {}) or log multiplier ({log_mul}) are not finite",
                    betas.0, betas.1
                )));
            }
            // As llama.cpp: the factor it divides by is 1 / (1 / factor).
            let freq_scale = 1.0 / factor;
            let own_mscale = family.yarn_own_mscale;
            Ok((factor, Some(YarnConfig::new(original, 1.0 / freq_scale, attn, betas, log_mul, own_mscale))))
        }
        other => {
            Err(file.corrupt(format!("{} is {other:?}; Hearth knows none, linear and yarn", key("rope.scaling.type"))))
        }
    }
}

/// `rope.dimension_sections`: four counts of rotation pairs, the rotated
/// pairs taking them in turn.
pub(super) fn rope_sections(file: &GgufFile, key: &str, head_dim: usize) -> Result<[usize; 4]> {
    let values = file.array(key)?;
    let counts: Vec<usize> = values
        .iter()
        .map(|v| match v {
            candle_core::quantized::gguf_file::Value::I32(x) if *x >= 0 => Some(*x as usize),
            candle_core::quantized::gguf_file::Value::U32(x) => Some(*x as usize),
            _ => None,
        })
        .collect::<Option<_>>()
        .ok_or_else(|| file.corrupt(format!("{key} holds something other than non-negative integers")))?;
    let Ok(sections) = <[usize; 4]>::try_from(counts.as_slice()) else {
        return Err(file.corrupt(format!("{key} has {} sections, expected 4", counts.len())));
    };
    // llama.cpp takes any sum from 1 to the head size: pair `i` belongs to
    // section `i % sum`, so sections shorter than the rotated pairs repeat.
    let sum = sections.iter().sum::<usize>();
    if sum == 0 || sum > head_dim {
        return Err(file.corrupt(format!(
            "{key} {sections:?} adds up to {sum} rotation pairs; heads of {head_dim} take 1 to {head_dim}"
        )));
    }
    if sections[..3].iter().all(|&s| s == 0) {
        // ggml's multi-section RoPE asserts on these.
        return Err(file.corrupt(format!("{key} {sections:?} gives no pair to time, height or width")));
    }
    Ok(sections)
}
