//! A GGUF file opened for reading: its metadata, and its tensors on demand.
//!
//! Hearth reads the header itself rather than through candle, because
//! candle refuses whole files over a tensor type it lacks (IQ4_XS files
//! hold IQ4_NL tensors), and panics or wraps on some malformed headers.
//! Every count and size here is checked against the file's length with
//! checked arithmetic, and every failure names the file, because users open
//! many of them.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

pub use candle_core::quantized::gguf_file::Value;
use candle_core::quantized::QTensor;
use candle_core::Device;

use crate::error::{EngineError, Result};
use crate::ggml_type::GgmlType;

/// An open GGUF file whose header has been read and checked against its size.
pub struct GgufFile {
    path: PathBuf,
    file: File,
    metadata: HashMap<String, Value>,
    tensors: HashMap<String, TensorInfo>,
}

/// Where a tensor lies in the file and what it holds.
#[derive(Debug, Clone)]
pub struct TensorInfo {
    pub dtype: GgmlType,
    /// Row-major: the last dimension is the contiguous one (GGUF stores them reversed).
    pub dims: Vec<usize>,
    /// Absolute offset of the data in the file.
    pub offset: u64,
    pub bytes: u64,
}

impl TensorInfo {
    pub fn elem_count(&self) -> usize {
        self.dims.iter().product()
    }
}

/// The raw bytes of one tensor.
pub struct RawTensor {
    pub dtype: GgmlType,
    pub dims: Vec<usize>,
    pub data: Vec<u8>,
}

const MAGIC: &[u8; 4] = b"GGUF";

impl GgufFile {
    /// Reads the header and checks that every tensor lies inside the file,
    /// so a truncated download fails here rather than half-way through loading.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let io = |source| EngineError::Io { path: path.clone(), source };
        let file = File::open(&path).map_err(io)?;
        let file_len = file.metadata().map_err(io)?.len();
        let mut r =
            HeaderReader { inner: BufReader::new(file.try_clone().map_err(io)?), pos: 0, len: file_len, path: &path };
        let (metadata, tensors) = r.header()?;
        Ok(Self { path, file, metadata, tensors })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn metadata(&self) -> &HashMap<String, Value> {
        &self.metadata
    }

    pub fn has_tensor(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    pub fn tensor_names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    pub fn tensor_info(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.get(name)
    }

    /// Another handle on the open file, for reading a tensor's rows as they
    /// are needed (Gemma 4's per-layer embeddings) rather than loading it.
    pub(crate) fn file_handle(&self) -> Result<File> {
        self.file.try_clone().map_err(|source| EngineError::Io { path: self.path.clone(), source })
    }

    /// A tensor's bytes, as stored.
    pub fn raw_tensor(&mut self, name: &str) -> Result<RawTensor> {
        let info = self.tensors.get(name).ok_or_else(|| self.corrupt(format!("missing tensor {name}")))?.clone();
        let len = usize::try_from(info.bytes)
            .map_err(|_| self.corrupt(format!("tensor {name} is too large for this machine")))?;
        let mut data = Vec::new();
        data.try_reserve_exact(len)
            .map_err(|_| self.corrupt(format!("tensor {name} ({len} bytes) does not fit in memory")))?;
        data.resize(len, 0);
        let io = |source| EngineError::Io { path: self.path.clone(), source };
        self.file.seek(SeekFrom::Start(info.offset)).map_err(io)?;
        self.file.read_exact(&mut data).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                EngineError::TruncatedModel { path: self.path.clone(), reason: format!("tensor {name} is cut short") }
            } else {
                io(e)
            }
        })?;
        Ok(RawTensor { dtype: info.dtype, dims: info.dims, data })
    }

    /// A tensor as candle's `QTensor` (norms, biases, and GPU weights).
    /// Types candle lacks are widened to f32 by Hearth's own dequantizers.
    pub fn tensor(&mut self, name: &str, device: &Device) -> Result<QTensor> {
        let raw = self.raw_tensor(name)?;
        self.qtensor(name, raw.dtype, &raw.data, raw.dims, device)
    }

    /// Tensor `name` cut along its first dimension into `count` tensors
    /// (a 3-D tensor of experts into each expert's matrix), read once.
    pub fn tensor_parts(&mut self, name: &str, count: usize, device: &Device) -> Result<Vec<QTensor>> {
        let raw = self.raw_tensor(name)?;
        let Some((&first, rest)) = raw.dims.split_first() else {
            return Err(self.corrupt(format!("tensor {name} has no dimensions")));
        };
        if count == 0 || first != count || raw.data.len() % count != 0 {
            return Err(self.corrupt(format!("tensor {name} of shape {:?} does not cut into {count}", raw.dims)));
        }
        raw.data
            .chunks_exact(raw.data.len() / count)
            .map(|part| self.qtensor(name, raw.dtype, part, rest.to_vec(), device))
            .collect()
    }

    /// `data` of type `dtype` and shape `dims` as a candle tensor; a type
    /// candle lacks is widened to f32 by Hearth's dequantizer, but MXFP4
    /// (gpt-oss's experts) becomes Q8_0, which holds its values exactly in
    /// twice its bytes rather than eight times.
    pub(crate) fn qtensor(
        &self,
        name: &str,
        dtype: GgmlType,
        data: &[u8],
        dims: Vec<usize>,
        device: &Device,
    ) -> Result<QTensor> {
        let fail = |e: candle_core::Error| self.corrupt(format!("tensor {name}: {e}"));
        let as_q8_0 = match dtype {
            GgmlType::Mxfp4 => crate::cpu::mxfp4_to_q8_0(data),
            _ => None,
        };
        match (dtype.to_candle(), as_q8_0) {
            (Some(dtype), _) => {
                candle_core::quantized::ggml_file::qtensor_from_ggml(dtype, data, dims, device).map_err(fail)
            }
            (None, Some(bytes)) => candle_core::quantized::ggml_file::qtensor_from_ggml(
                candle_core::quantized::GgmlDType::Q8_0,
                &bytes,
                dims,
                device,
            )
            .map_err(fail),
            (None, None) => {
                let values = crate::cpu::dequantize(dtype, data).ok_or_else(|| self.unsupported_type(name, dtype))?;
                let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
                candle_core::quantized::ggml_file::qtensor_from_ggml(
                    candle_core::quantized::GgmlDType::F32,
                    &bytes,
                    dims,
                    device,
                )
                .map_err(fail)
            }
        }
    }

    pub fn tensor_opt(&mut self, name: &str, device: &Device) -> Result<Option<QTensor>> {
        if self.has_tensor(name) {
            self.tensor(name, device).map(Some)
        } else {
            Ok(None)
        }
    }

    /// The error for a tensor type Hearth has no kernel for.
    pub(crate) fn unsupported_type(&self, name: &str, dtype: GgmlType) -> EngineError {
        EngineError::UnsupportedTensorType {
            path: self.path.clone(),
            tensor: name.to_string(),
            dtype: dtype.name(),
            hint: crate::ggml_type::RUNNABLE_HINT,
        }
    }

    pub fn string(&self, key: &str) -> Result<&str> {
        match self.metadata().get(key) {
            Some(Value::String(s)) => Ok(s),
            Some(_) => Err(self.corrupt(format!("metadata {key} is not a string"))),
            None => Err(self.corrupt(format!("missing metadata {key}"))),
        }
    }

    pub fn string_opt(&self, key: &str) -> Option<&str> {
        match self.metadata().get(key) {
            Some(Value::String(s)) => Some(s),
            _ => None,
        }
    }

    pub fn u32(&self, key: &str) -> Result<u32> {
        self.u32_opt(key)?.ok_or_else(|| self.corrupt(format!("missing metadata {key}")))
    }

    /// Integers in GGUF come in any width; accept all that fit.
    pub fn u32_opt(&self, key: &str) -> Result<Option<u32>> {
        let Some(v) = self.metadata().get(key) else { return Ok(None) };
        let n: Option<u64> = match v {
            Value::U8(x) => Some(*x as u64),
            Value::U16(x) => Some(*x as u64),
            Value::U32(x) => Some(*x as u64),
            Value::U64(x) => Some(*x),
            Value::I8(x) => u64::try_from(*x).ok(),
            Value::I16(x) => u64::try_from(*x).ok(),
            Value::I32(x) => u64::try_from(*x).ok(),
            Value::I64(x) => u64::try_from(*x).ok(),
            _ => None,
        };
        n.and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| self.corrupt(format!("metadata {key} is not a non-negative integer")))
    }

    pub fn f32_opt(&self, key: &str) -> Result<Option<f32>> {
        match self.metadata().get(key) {
            None => Ok(None),
            Some(Value::F32(x)) => Ok(Some(*x)),
            Some(Value::F64(x)) => Ok(Some(*x as f32)),
            Some(_) => Err(self.corrupt(format!("metadata {key} is not a float"))),
        }
    }

    pub fn bool_opt(&self, key: &str) -> Option<bool> {
        match self.metadata().get(key) {
            Some(Value::Bool(b)) => Some(*b),
            _ => None,
        }
    }

    /// A count per layer: one value for every layer, or an array of `n`
    /// (as llama.cpp's `get_key_or_arr` reads `attention.head_count` and
    /// the like). `None` when absent.
    pub fn per_layer_u32(&self, key: &str, n: usize) -> Result<Option<Vec<usize>>> {
        match self.metadata().get(key) {
            None => Ok(None),
            Some(Value::Array(values)) => {
                if values.len() != n {
                    return Err(self.corrupt(format!("{key} has {} entries for {n} layers", values.len())));
                }
                let counts: Option<Vec<usize>> = values
                    .iter()
                    .map(|v| match v {
                        Value::U32(x) => Some(*x as usize),
                        Value::I32(x) => usize::try_from(*x).ok(),
                        Value::U64(x) => usize::try_from(*x).ok(),
                        Value::I64(x) => usize::try_from(*x).ok(),
                        Value::U16(x) => Some(*x as usize),
                        Value::U8(x) => Some(*x as usize),
                        _ => None,
                    })
                    .collect();
                counts.map(Some).ok_or_else(|| self.corrupt(format!("{key} holds something other than counts")))
            }
            Some(_) => Ok(self.u32_opt(key)?.map(|v| vec![v as usize; n])),
        }
    }

    /// An array of booleans (`attention.sliding_window_pattern`).
    pub fn bools(&self, key: &str) -> Result<Vec<bool>> {
        self.array(key)?
            .iter()
            .map(|v| match v {
                Value::Bool(b) => Some(*b),
                Value::U8(x) => Some(*x != 0),
                Value::I8(x) => Some(*x != 0),
                Value::U32(x) => Some(*x != 0),
                Value::I32(x) => Some(*x != 0),
                _ => None,
            })
            .collect::<Option<Vec<bool>>>()
            .ok_or_else(|| self.corrupt(format!("{key} is not a list of booleans")))
    }

    pub fn array(&self, key: &str) -> Result<&[Value]> {
        match self.metadata().get(key) {
            Some(Value::Array(a)) => Ok(a),
            Some(_) => Err(self.corrupt(format!("metadata {key} is not an array"))),
            None => Err(self.corrupt(format!("missing metadata {key}"))),
        }
    }

    pub(crate) fn corrupt(&self, reason: impl Into<String>) -> EngineError {
        EngineError::CorruptModel { path: self.path.clone(), reason: reason.into() }
    }
}

/// Reads the header with every length checked against what is left of the file.
struct HeaderReader<'a> {
    inner: BufReader<File>,
    pos: u64,
    len: u64,
    path: &'a Path,
}

impl HeaderReader<'_> {
    fn corrupt(&self, reason: impl Into<String>) -> EngineError {
        EngineError::CorruptModel { path: self.path.to_path_buf(), reason: reason.into() }
    }

    fn truncated(&self, reason: impl Into<String>) -> EngineError {
        EngineError::TruncatedModel { path: self.path.to_path_buf(), reason: reason.into() }
    }

    fn remaining(&self) -> u64 {
        self.len.saturating_sub(self.pos)
    }

    fn bytes<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut b = [0u8; N];
        if self.remaining() < N as u64 {
            return Err(self.truncated(format!("the header ends early, at byte {}", self.len)));
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
            return Err(self.truncated(format!("{what} count {n} does not fit in the rest of the file")));
        }
        usize::try_from(n).map_err(|_| self.corrupt(format!("{what} count {n} is too large")))
    }

    fn string(&mut self) -> Result<String> {
        let n = self.count("string length", 1)?;
        let mut b = vec![0u8; n];
        self.inner.read_exact(&mut b).map_err(|source| EngineError::Io { path: self.path.to_path_buf(), source })?;
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
                let mut items = Vec::with_capacity(n);
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

    fn header(&mut self) -> Result<(HashMap<String, Value>, HashMap<String, TensorInfo>)> {
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
        let mut metadata = HashMap::with_capacity(n_kv);
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
        let mut infos = Vec::with_capacity(n_tensors);
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
            tensors.insert(name, TensorInfo { dtype, dims, offset: start.unwrap_or(0), bytes });
        }
        Ok((metadata, tensors))
    }
}
