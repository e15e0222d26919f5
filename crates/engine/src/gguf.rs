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

mod header;
mod split;

use header::HeaderReader;
pub use split::{split_part, SplitPart};

/// An open GGUF model whose header has been read and checked against its
/// size: one file, or every part of a model split by `llama-gguf-split`.
pub struct GgufFile {
    /// The model's first (or only) file, which names it.
    path: PathBuf,
    /// Every file of the model in order; empty when only a header was read
    /// (`read_header`, a file not on this computer).
    parts: Vec<Part>,
    /// The bytes of every file of the model.
    len: u64,
    metadata: HashMap<String, Value>,
    tensors: HashMap<String, TensorInfo>,
}

/// One file of a model: the whole model, or one part of a split one.
struct Part {
    path: PathBuf,
    file: File,
    len: u64,
}

/// Where a tensor lies and what it holds.
#[derive(Debug, Clone)]
pub struct TensorInfo {
    pub dtype: GgmlType,
    /// Row-major: the last dimension is the contiguous one (GGUF stores them reversed).
    pub dims: Vec<usize>,
    /// Which of the model's files holds it (0 unless the model is split).
    pub part: usize,
    /// Absolute offset of the data in its file.
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

/// One file's header.
type Header = (HashMap<String, Value>, HashMap<String, TensorInfo>);

impl GgufFile {
    /// Reads the header and checks that every tensor lies inside the file,
    /// so a truncated download fails here rather than half-way through loading.
    /// A model in parts is opened whole from any of its parts: every part is
    /// read and checked against the first (`split.rs`).
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let (part, header) = Part::open(path.as_ref())?;
        split::gather(part, header)
    }

    /// A model file's header read from `reader` (the start of the file, as
    /// an HTTP response's body gives it), for a file of `len` bytes of which
    /// `reader` gives at most `readable`, named `name`. Its facts can be
    /// read, its tensors not.
    pub fn read_header(reader: impl Read, len: u64, readable: u64, name: &Path) -> Result<Self> {
        let readable = readable.min(len);
        let mut r = HeaderReader { inner: BufReader::new(reader), pos: 0, len, readable, path: name };
        let (metadata, tensors) = r.header()?;
        Ok(Self { path: name.to_path_buf(), parts: Vec::new(), len, metadata, tensors })
    }

    /// The model's files in order (one unless it is split; none after `read_header`).
    pub fn part_paths(&self) -> Vec<&Path> {
        self.parts.iter().map(|p| p.path.as_path()).collect()
    }

    /// The bytes of every file of the model (what `read_header` was told).
    pub fn total_len(&self) -> u64 {
        self.len
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

    /// The file that holds tensor `name` (its part of a split model) and
    /// another handle on it, for reading the tensor's rows as they are
    /// needed (Gemma 4's per-layer embeddings) rather than loading it.
    pub(crate) fn tensor_file(&self, name: &str) -> Result<(PathBuf, File)> {
        let info = self.tensors.get(name).ok_or_else(|| self.corrupt(format!("missing tensor {name}")))?;
        let part = self.part(name, info)?;
        let file = part.file.try_clone().map_err(|source| EngineError::Io { path: part.path.clone(), source })?;
        Ok((part.path.clone(), file))
    }

    fn part(&self, name: &str, info: &TensorInfo) -> Result<&Part> {
        self.parts
            .get(info.part)
            .ok_or_else(|| self.corrupt(format!("tensor {name}: only the file's header was read, not its data")))
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
        let part = self.part(name, &info)?;
        let io = |source| EngineError::Io { path: part.path.clone(), source };
        let mut file = &part.file;
        file.seek(SeekFrom::Start(info.offset)).map_err(io)?;
        file.read_exact(&mut data).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                EngineError::TruncatedModel { path: part.path.clone(), reason: format!("tensor {name} is cut short") }
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

impl Part {
    /// Opens one file and reads its header.
    fn open(path: &Path) -> Result<(Self, Header)> {
        let io = |source| EngineError::Io { path: path.to_path_buf(), source };
        let file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        let mut r = HeaderReader { inner: BufReader::new(&file), pos: 0, len, readable: len, path };
        let header = r.header()?;
        Ok((Self { path: path.to_path_buf(), file, len }, header))
    }
}
