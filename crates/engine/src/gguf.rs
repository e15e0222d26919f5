//! A GGUF file opened for reading: its metadata, and its tensors on demand.
//!
//! Every failure names the file, because users open many of them.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Seek};
use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::quantized::QTensor;
use candle_core::Device;

use crate::error::{EngineError, Result};

/// An open GGUF file whose header has been read and checked against its size.
pub struct GgufFile {
    path: PathBuf,
    reader: BufReader<File>,
    content: Content,
    file_len: u64,
}

impl GgufFile {
    /// Reads the header and checks that every tensor lies inside the file,
    /// so a truncated download fails here rather than half-way through loading.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let file = File::open(&path).map_err(|source| EngineError::Io { path: path.clone(), source })?;
        let file_len = file
            .metadata()
            .map_err(|source| EngineError::Io { path: path.clone(), source })?
            .len();
        let mut reader = BufReader::new(file);
        let content = Content::read(&mut reader).map_err(|e| classify_read_error(&path, e))?;
        let this = Self { path, reader, content, file_len };
        this.check_tensor_bounds()?;
        Ok(this)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn metadata(&self) -> &HashMap<String, Value> {
        &self.content.metadata
    }

    pub fn has_tensor(&self, name: &str) -> bool {
        self.content.tensor_infos.contains_key(name)
    }

    pub fn tensor_names(&self) -> impl Iterator<Item = &str> {
        self.content.tensor_infos.keys().map(String::as_str)
    }

    pub fn tensor(&mut self, name: &str, device: &Device) -> Result<QTensor> {
        if !self.has_tensor(name) {
            return Err(self.corrupt(format!("missing tensor {name}")));
        }
        self.content
            .tensor(&mut self.reader, name, device)
            .map_err(|e| self.corrupt(format!("tensor {name}: {e}")))
    }

    pub fn tensor_opt(&mut self, name: &str, device: &Device) -> Result<Option<QTensor>> {
        if self.has_tensor(name) {
            self.tensor(name, device).map(Some)
        } else {
            Ok(None)
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

    fn check_tensor_bounds(&self) -> Result<()> {
        for (name, info) in &self.content.tensor_infos {
            let elems = info.shape.elem_count();
            let block = info.ggml_dtype.block_size();
            if elems % block != 0 {
                return Err(self.corrupt(format!("tensor {name} has {elems} elements, not a multiple of {block}")));
            }
            let bytes = (elems / block) as u64 * info.ggml_dtype.type_size() as u64;
            let end = self.content.tensor_data_offset.saturating_add(info.offset).saturating_add(bytes);
            if end > self.file_len {
                return Err(EngineError::TruncatedModel {
                    path: self.path.clone(),
                    reason: format!("tensor {name} ends at byte {end} but the file has {} bytes", self.file_len),
                });
            }
        }
        Ok(())
    }

    /// Rewinds so tensors can be read in any order.
    pub(crate) fn rewind(&mut self) -> Result<()> {
        self.reader
            .rewind()
            .map_err(|source| EngineError::Io { path: self.path.clone(), source })
    }
}

fn classify_read_error(path: &Path, e: candle_core::Error) -> EngineError {
    let reason = e.to_string();
    let truncated = reason.contains("failed to fill whole buffer")
        || reason.contains("remaining")
        || reason.contains("UnexpectedEof");
    if truncated {
        EngineError::TruncatedModel { path: path.to_path_buf(), reason }
    } else {
        EngineError::CorruptModel { path: path.to_path_buf(), reason }
    }
}
