//! A cache saved to and read back from bytes (`write_to`, `read_from`).

use std::io::{Read, Write};

use candle_core::Device;

use super::{f16_bytes, KvCache, KvShape, LeHalves};
use crate::error::{EngineError, Result};
use crate::model::config::ModelConfig;

const MAGIC: &[u8; 8] = b"HEARTHKV";
/// 3: no values for layers whose values are their keys' (latent
/// attention); 2: keys and values in f16; 1 held f32.
const FORMAT_VERSION: u32 = 3;

impl KvCache {
    /// Serialises the filled positions (not the spare capacity).
    pub fn write_to(&self, w: &mut impl Write) -> Result<()> {
        let io = |e: std::io::Error| EngineError::CorruptCache(format!("write failed: {e}"));
        w.write_all(MAGIC).map_err(io)?;
        for n in [
            FORMAT_VERSION as u64,
            self.layers_kept() as u64,
            self.batch as u64,
            self.n_kv_heads as u64,
            self.head_dim as u64,
            self.len as u64,
        ] {
            w.write_all(&n.to_le_bytes()).map_err(io)?;
        }
        for i in 0..self.layers.len().min(self.n_layers) {
            if self.len == 0 {
                break;
            }
            let (k, v) = self.bits(i, 0, self.len)?;
            for data in [k, v] {
                w.write_all(&f16_bytes(&data)).map_err(io)?;
            }
        }
        if let Some(r) = self.recurrent.as_ref().filter(|_| self.len > 0) {
            if !r.is_at(self.len) {
                return Err(EngineError::CorruptCache("the recurrent state is mid-pass".into()));
            }
            w.write_all(&r.to_bytes()).map_err(io)?;
        }
        Ok(())
    }

    /// Reads what `write_to` wrote, checking that it fits `config` and `max_len`.
    pub fn read_from(r: &mut impl Read, config: &ModelConfig, max_len: usize, device: &Device) -> Result<Self> {
        let bad = |m: String| EngineError::CorruptCache(m);
        let mut magic = [0u8; 8];
        r.read_exact(&mut magic).map_err(|e| bad(format!("header: {e}")))?;
        if &magic != MAGIC {
            return Err(bad("not a Hearth KV cache".into()));
        }
        let mut header = [0u64; 6];
        for h in header.iter_mut() {
            let mut b = [0u8; 8];
            r.read_exact(&mut b).map_err(|e| bad(format!("header: {e}")))?;
            *h = u64::from_le_bytes(b);
        }
        let [version, n_layers, batch, n_kv_heads, head_dim, len] = header.map(|x| x as usize);
        if version != FORMAT_VERSION as usize {
            return Err(bad(format!("format version {version}, expected {FORMAT_VERSION}")));
        }
        // The model's layers, and its MTP head's where it ran for the cache.
        let head = n_layers == config.cache_layers() && config.mtp_layers > 0;
        if (n_layers != config.n_layers && !head)
            || (n_kv_heads, head_dim) != (config.n_kv_heads, config.head_dim)
            || batch == 0
            || batch > 64
        {
            return Err(bad("cache shape does not match the model".into()));
        }
        if len > max_len {
            return Err(bad(format!("cache holds {len} positions, more than the context of {max_len}")));
        }
        let mut cache = KvCache::new(config, max_len, device);
        if head {
            cache.start_mtp();
        }
        if len == 0 {
            return Ok(cache);
        }
        cache.batch = batch;
        cache.reserve(len, batch)?;
        let mut buf = Vec::new();
        for i in 0..n_layers {
            let Some(KvShape { heads, key_dim, value_dim }) = cache.kv_layers[i] else { continue };
            let n = batch * heads * len * key_dim;
            buf.resize((n + batch * heads * len * value_dim) * 2, 0);
            r.read_exact(&mut buf).map_err(|e| bad(format!("layer {i}: {e}")))?;
            let (k, v) = buf.split_at(n * 2);
            cache.write_bits(i, LeHalves::new(k), LeHalves::new(v), len)?;
        }
        cache.advance(len);
        if let Some(state) = &mut cache.recurrent {
            let mut bytes = vec![0u8; state.state_bytes()];
            r.read_exact(&mut bytes).map_err(|e| bad(format!("recurrent state: {e}")))?;
            state.restore_bytes(&bytes, len).map_err(bad)?;
        }
        Ok(cache)
    }
}
