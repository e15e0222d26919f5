//! The header of one GGUF file, read from any byte stream (a file, or the
//! start of an HTTP response) with every length checked against the file's
//! size, so a truncated or hostile file fails here with its name.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

use super::{TensorInfo, Value, MAGIC};
use crate::error::{EngineError, Result};
use crate::ggml_type::GgmlType;

/// Reads the header with every length checked against what is left of the file.
pub(super) struct HeaderReader<'a, R> {
    pub(super) inner: R,
    pub(super) pos: u64,
    /// The file's size: every tensor must end within it.
    pub(super) len: u64,
    /// How many bytes `inner` can give (the file's size, or the part of it
    /// an HTTP response carries): every count must fit in what is left.
    pub(super) readable: u64,
    pub(super) path: &'a Path,
}

/// Items made room for ahead of reading them: a count that lies (within
/// the file's size, but of values far larger in memory) grows the vector as
/// items really arrive rather than reserving it all first.
const MAX_PREALLOCATED: usize = 1 << 16;

impl<R: Read> HeaderReader<'_, R> {
    fn corrupt(&self, reason: impl Into<String>) -> EngineError {
        EngineError::CorruptModel { path: self.path.to_path_buf(), reason: reason.into() }
    }

    fn truncated(&self, reason: impl Into<String>) -> EngineError {
        EngineError::TruncatedModel { path: self.path.to_path_buf(), reason: reason.into() }
    }

    fn remaining(&self) -> u64 {
        self.readable.saturating_sub(self.pos)
    }

    /// Running out of bytes: the file is truncated, or (where fewer bytes
    /// were fetched than the file has) its header is longer than fetched.
    fn ends_early(&self, what: String) -> EngineError {
        if self.readable < self.len {
            self.corrupt(format!("its header is longer than the {} bytes read of it ({what})", self.readable))
        } else {
            self.truncated(what)
        }
    }

    fn bytes<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut b = [0u8; N];
        if self.remaining() < N as u64 {
            return Err(self.ends_early(format!("the header ends early, at byte {}", self.readable)));
        }
        self.inner.read_exact(&mut b).map_err(|source| EngineError::Io { path: self.path.to_path_buf(), source })?;
        self.pos += N as u64;
        Ok(b)
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.bytes()?))
    }

    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.bytes()?))
    }

    /// A count of items that each take at least `min_bytes`: more than the
    /// rest of the file could hold means the header is corrupt.
    fn count(&mut self, what: &str, min_bytes: u64) -> Result<usize> {
        let n = self.u64()?;
        if n.saturating_mul(min_bytes.max(1)) > self.remaining() {
            return Err(self.ends_early(format!("{what} count {n} does not fit in the rest of the file")));
        }
        usize::try_from(n).map_err(|_| self.corrupt(format!("{what} count {n} is too large")))
    }

    fn string(&mut self) -> Result<String> {
        let n = self.count("string length", 1)?;
        let mut b = Vec::with_capacity(n.min(MAX_PREALLOCATED));
        (&mut self.inner)
            .take(n as u64)
            .read_to_end(&mut b)
            .map_err(|source| EngineError::Io { path: self.path.to_path_buf(), source })?;
        if b.len() < n {
            return Err(self.ends_early(format!("a string of {n} bytes is cut short")));
        }
        self.pos += n as u64;
        String::from_utf8(b).map_err(|_| self.corrupt("a string in the header is not UTF-8"))
    }

    fn value(&mut self, ty: u32, depth: u32) -> Result<Value> {
        Ok(match ty {
            0 => Value::U8(self.bytes::<1>()?[0]),
            1 => Value::I8(self.bytes::<1>()?[0] as i8),
            2 => Value::U16(u16::from_le_bytes(self.bytes()?)),
            3 => Value::I16(i16::from_le_bytes(self.bytes()?)),
            4 => Value::U32(self.u32()?),
            5 => Value::I32(i32::from_le_bytes(self.bytes()?)),
            6 => Value::F32(f32::from_le_bytes(self.bytes()?)),
            7 => match self.bytes::<1>()?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => return Err(self.corrupt(format!("a boolean holds {b}"))),
            },
            8 => Value::String(self.string()?),
            9 => {
                if depth > 8 {
                    return Err(self.corrupt("arrays nest too deeply"));
                }
                let item = self.u32()?;
                let min = match item {
                    0 | 1 | 7 => 1,
                    2 | 3 => 2,
                    4..=6 => 4,
                    _ => 8,
                };
                let n = self.count("array", min)?;
                let mut items = Vec::with_capacity(n.min(MAX_PREALLOCATED));
                for _ in 0..n {
                    items.push(self.value(item, depth + 1)?);
                }
                Value::Array(items)
            }
            10 => Value::U64(self.u64()?),
            11 => Value::I64(i64::from_le_bytes(self.bytes()?)),
            12 => Value::F64(f64::from_le_bytes(self.bytes()?)),
            t => return Err(self.corrupt(format!("unknown metadata value type {t}"))),
        })
    }

    pub(super) fn header(&mut self) -> Result<(HashMap<String, Value>, HashMap<String, TensorInfo>)> {
        if self.len < 4 || &self.bytes::<4>()? != MAGIC {
            return Err(self.corrupt("it does not start with the GGUF magic"));
        }
        let version = self.u32()?;
        if !(2..=3).contains(&version) {
            return Err(self.corrupt(format!("GGUF version {version} is not supported (2 and 3 are)")));
        }
        // A tensor info takes at least 24 bytes; a key-value pair at least 13.
        let n_tensors = self.count("tensor", 24)?;
        let n_kv = self.count("metadata", 13)?;
        let mut metadata = HashMap::with_capacity(n_kv.min(MAX_PREALLOCATED));
        for _ in 0..n_kv {
            let key = self.string()?;
            let ty = self.u32()?;
            let v = self.value(ty, 0)?;
            metadata.insert(key, v);
        }
        let alignment = match metadata.get("general.alignment") {
            None => 32,
            Some(Value::U32(a)) if a.is_power_of_two() => *a as u64,
            Some(v) => return Err(self.corrupt(format!("general.alignment is {v:?}, not a power of two"))),
        };
        let mut infos = Vec::with_capacity(n_tensors.min(MAX_PREALLOCATED));
        for _ in 0..n_tensors {
            let name = self.string()?;
            let n_dims = self.u32()?;
            if n_dims == 0 || n_dims > 4 {
                return Err(self.corrupt(format!("tensor {name} has {n_dims} dimensions")));
            }
            let mut dims = Vec::with_capacity(n_dims as usize);
            let mut elems = 1u64;
            for _ in 0..n_dims {
                let d = self.u64()?;
                elems = elems
                    .checked_mul(d)
                    .ok_or_else(|| self.corrupt(format!("tensor {name}'s dimensions multiply past 2^64")))?;
                dims.push(usize::try_from(d).map_err(|_| self.corrupt(format!("tensor {name} is too large")))?);
            }
            dims.reverse();
            let id = self.u32()?;
            let dtype = GgmlType::from_id(id)
                .ok_or_else(|| self.corrupt(format!("tensor {name} has unknown type number {id}")))?;
            // Blocks never cross rows (ggml's own check): each row's values
            // must fill whole blocks, not just the tensor's.
            let row = dims.last().copied().unwrap_or(0);
            if !row.is_multiple_of(dtype.block_size()) {
                return Err(self.corrupt(format!(
                    "tensor {name} has rows of {row} values, which do not fill whole {dtype} blocks of {}",
                    dtype.block_size()
                )));
            }
            let bytes = dtype.bytes_for(elems).ok_or_else(|| {
                self.corrupt(format!(
                    "tensor {name} has {elems} values, which do not fill whole {dtype} blocks of {}",
                    dtype.block_size()
                ))
            })?;
            let offset = self.u64()?;
            if offset % alignment != 0 {
                return Err(self.corrupt(format!("tensor {name}'s data is not aligned to {alignment} bytes")));
            }
            infos.push((name, dtype, dims, offset, bytes));
        }
        let data_start = self.pos.div_ceil(alignment) * alignment;
        let mut tensors = HashMap::with_capacity(infos.len());
        for (name, dtype, dims, offset, bytes) in infos {
            let start = data_start.checked_add(offset);
            let end = start.and_then(|s| s.checked_add(bytes));
            match end {
                Some(end) if end <= self.len => {}
                _ => {
                    return Err(self.truncated(format!(
                        "tensor {name} ends at byte {} but the file has {} bytes",
                        end.map_or_else(|| "past 2^64".to_string(), |e| e.to_string()),
                        self.len
                    )))
                }
            }
            if tensors.contains_key(&name) {
                return Err(self.corrupt(format!("tensor {name} appears twice")));
            }
            tensors.insert(name, TensorInfo { dtype, dims, part: 0, offset: start.unwrap_or(0), bytes });
        }
        Ok((metadata, tensors))
    }
}
