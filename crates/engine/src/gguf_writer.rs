//! Writes GGUF files (version 3) one tensor at a time, so a file larger
//! than memory can be written, in any type Hearth knows the blocks of
//! (candle's writer has no MXFP4). What `GgufFile` reads back.

use std::io::Write;
use std::path::Path;

use candle_core::quantized::gguf_file::Value;

use crate::error::{EngineError, Result};
use crate::ggml_type::GgmlType;
use crate::gguf::GgufFile;

/// Where tensor data starts and each tensor is padded to.
const ALIGNMENT: u64 = 32;

/// One tensor's name, shape (rows first, as `GgufFile` reports it) and type.
#[derive(Debug, Clone)]
pub struct TensorEntry {
    pub name: String,
    pub dims: Vec<usize>,
    pub dtype: GgmlType,
}

impl TensorEntry {
    /// The bytes its values take, or why they do not fill whole blocks.
    fn bytes(&self) -> Result<u64> {
        let elems = self.dims.iter().map(|&d| d as u64).product::<u64>();
        let row = self.dims.last().copied().unwrap_or(0);
        match self.dtype.bytes_for(elems) {
            Some(n) if row.is_multiple_of(self.dtype.block_size()) => Ok(n),
            _ => Err(EngineError::InvalidSetting {
                field: "tensor",
                reason: format!("{}'s rows of {row} values do not fill whole {} blocks", self.name, self.dtype.name()),
            }),
        }
    }
}

/// Writes `metadata` and `tensors` to `path`, asking `data(i)` for tensor
/// `i`'s bytes in order; each must be exactly as long as its type and
/// shape make it. Written to `path.part` and renamed, so a failed write
/// leaves no file that looks whole.
pub fn write(
    path: &Path,
    metadata: &[(String, Value)],
    tensors: &[TensorEntry],
    mut data: impl FnMut(usize) -> Result<Vec<u8>>,
) -> Result<()> {
    let sizes: Vec<u64> = tensors.iter().map(TensorEntry::bytes).collect::<Result<_>>()?;
    let io = |source: std::io::Error| EngineError::Io { path: path.to_path_buf(), source };
    let tmp = path.with_extension("gguf.part");
    let mut w = std::io::BufWriter::new(std::fs::File::create(&tmp).map_err(io)?);
    let mut header = Vec::new();
    header.extend_from_slice(b"GGUF");
    header.extend_from_slice(&3u32.to_le_bytes());
    header.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    header.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
    for (key, value) in metadata {
        put_string(&mut header, key);
        header.extend_from_slice(&value_type(value).to_le_bytes());
        put_value(&mut header, value);
    }
    let mut offset = 0u64;
    for (t, &size) in tensors.iter().zip(&sizes) {
        put_string(&mut header, &t.name);
        header.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
        for &d in t.dims.iter().rev() {
            header.extend_from_slice(&(d as u64).to_le_bytes());
        }
        header.extend_from_slice(&t.dtype.id().to_le_bytes());
        header.extend_from_slice(&offset.to_le_bytes());
        offset = (offset + size).next_multiple_of(ALIGNMENT);
    }
    header.resize((header.len() as u64).next_multiple_of(ALIGNMENT) as usize, 0);
    w.write_all(&header).map_err(io)?;
    for (i, (t, &size)) in tensors.iter().zip(&sizes).enumerate() {
        let bytes = data(i)?;
        if bytes.len() as u64 != size {
            return Err(EngineError::InvalidSetting {
                field: "tensor",
                reason: format!("{} has {} bytes, its shape and type make {size}", t.name, bytes.len()),
            });
        }
        w.write_all(&bytes).map_err(io)?;
        let pad = size.next_multiple_of(ALIGNMENT) - size;
        w.write_all(&vec![0u8; pad as usize]).map_err(io)?;
    }
    w.into_inner().map_err(|e| io(e.into_error()))?.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

/// Writes `source` again as `count` parts, as `llama-gguf-split --split`
/// does: `first` must be named `…-00001-of-0000N.gguf`; the first part
/// holds the metadata, every part the `split.*` keys and a run of the
/// tensors in file order. Returns the parts' paths.
pub fn write_split(source: &mut GgufFile, first: &Path, count: u16) -> Result<Vec<std::path::PathBuf>> {
    let bad = |reason: String| EngineError::InvalidSetting { field: "split", reason };
    let named = crate::gguf::split_part(first)
        .filter(|p| p.number == 1 && p.count == u32::from(count))
        .ok_or_else(|| bad(format!("{} is not named as part 1 of {count}", first.display())))?;
    let mut order: Vec<(usize, u64, String)> = source
        .tensor_names()
        .map(|n| {
            let info = source.tensor_info(n).expect("listed");
            (info.part, info.offset, n.to_string())
        })
        .collect();
    order.sort();
    if usize::from(count) > order.len() || count == 0 {
        return Err(bad(format!("{} tensors do not make {count} parts", order.len())));
    }
    let split_keys = |no: usize| {
        vec![
            ("split.no".to_string(), Value::U16(no as u16)),
            ("split.count".to_string(), Value::U16(count)),
            ("split.tensors.count".to_string(), Value::I32(order.len() as i32)),
        ]
    };
    let mut metadata: Vec<(String, Value)> = source
        .metadata()
        .iter()
        .filter(|(k, _)| !k.starts_with("split."))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    metadata.sort_by(|a, b| a.0.cmp(&b.0));
    let paths = named.paths();
    let n = order.len();
    for (no, path) in paths.iter().enumerate() {
        let names = &order[no * n / paths.len()..(no + 1) * n / paths.len()];
        let mut keys = if no == 0 { metadata.clone() } else { Vec::new() };
        keys.extend(split_keys(no));
        let entries: Vec<TensorEntry> = names
            .iter()
            .map(|(_, _, n)| {
                let info = source.tensor_info(n).expect("listed");
                TensorEntry { name: n.clone(), dims: info.dims.clone(), dtype: info.dtype }
            })
            .collect();
        write(path, &keys, &entries, |i| source.raw_tensor(&names[i].2).map(|t| t.data))?;
    }
    Ok(paths)
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// GGUF's number for a value's type.
fn value_type(v: &Value) -> u32 {
    match v {
        Value::U8(_) => 0,
        Value::I8(_) => 1,
        Value::U16(_) => 2,
        Value::I16(_) => 3,
        Value::U32(_) => 4,
        Value::I32(_) => 5,
        Value::F32(_) => 6,
        Value::Bool(_) => 7,
        Value::String(_) => 8,
        Value::Array(_) => 9,
        Value::U64(_) => 10,
        Value::I64(_) => 11,
        Value::F64(_) => 12,
    }
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(*x as u8),
        Value::String(s) => put_string(out, s),
        Value::Array(items) => {
            // An empty array's item type is never read; say u32.
            out.extend_from_slice(&items.first().map_or(4, value_type).to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                put_value(out, item);
            }
        }
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}
