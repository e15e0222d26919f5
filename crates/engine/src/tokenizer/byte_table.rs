//! The raw bytes each token stands for, which decoding reads: GPT-2's
//! byte-level alphabet, and SentencePiece-style pieces and byte tokens.

use super::{TYPE_BYTE, TYPE_CONTROL, TYPE_USER_DEFINED};

/// GPT-2's reversible map from bytes to printable characters: byte-level
/// vocabularies spell every token in these characters.
pub fn byte_level_alphabet() -> [char; 256] {
    let mut n = 0u32;
    std::array::from_fn(|b| {
        let b = b as u32;
        let printable = (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        let c = if printable {
            b
        } else {
            n += 1;
            255 + n
        };
        char::from_u32(c).expect("valid code point")
    })
}

pub(super) fn byte_level_table(tokens: &[String], types: &[i32]) -> Vec<Vec<u8>> {
    let char_to_byte: std::collections::HashMap<char, u8> =
        byte_level_alphabet().iter().enumerate().map(|(b, &c)| (c, b as u8)).collect();
    tokens
        .iter()
        .zip(types)
        .map(|(t, &ty)| match ty {
            TYPE_CONTROL => Vec::new(),
            // User-defined tokens are stored as plain text, not byte-mapped.
            TYPE_USER_DEFINED => t.as_bytes().to_vec(),
            _ => t
                .chars()
                .flat_map(|c| char_to_byte.get(&c).copied().map_or_else(|| c.to_string().into_bytes(), |b| vec![b]))
                .collect(),
        })
        .collect()
}

pub(super) fn spm_table(tokens: &[String], types: &[i32]) -> Vec<Vec<u8>> {
    tokens
        .iter()
        .zip(types)
        .map(|(t, &ty)| match ty {
            TYPE_CONTROL => Vec::new(),
            TYPE_BYTE => parse_byte_token(t).map_or_else(|| t.as_bytes().to_vec(), |b| vec![b]),
            _ => t.replace('▁', " ").into_bytes(),
        })
        .collect()
}

fn parse_byte_token(t: &str) -> Option<u8> {
    let hex = t.strip_prefix("<0x")?.strip_suffix('>')?;
    u8::from_str_radix(hex, 16).ok()
}
