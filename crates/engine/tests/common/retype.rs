//! Rewrites a GGUF file with some of its tensors turned into MXFP4 (GGML
//! type 39), which candle's writer cannot write: random blocks of the
//! same element count, their exponents in the range real quantizers give,
//! so both engines run the same MXFP4 weights.

use std::path::Path;

const MXFP4: u32 = 39;
const MXFP4_BLOCK_BYTES: usize = 17;

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> &[u8] {
        let s = &self.bytes[self.at..self.at + n];
        self.at += n;
        s
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take(4).try_into().unwrap())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take(8).try_into().unwrap())
    }
    fn string(&mut self) -> String {
        let n = self.u64() as usize;
        String::from_utf8(self.take(n).to_vec()).unwrap()
    }
    /// Skips one metadata value of type `t`.
    fn skip_value(&mut self, t: u32) {
        match t {
            0 | 1 | 7 => self.at += 1,
            2 | 3 => self.at += 2,
            4..=6 => self.at += 4,
            10..=12 => self.at += 8,
            8 => {
                self.string();
            }
            9 => {
                let (item, n) = (self.u32(), self.u64());
                for _ in 0..n {
                    self.skip_value(item);
                }
            }
            _ => panic!("metadata type {t}"),
        }
    }
}

/// Rewrites `path` with every tensor whose name `pick` accepts (and whose
/// rows are whole 32-value blocks) as random MXFP4 blocks from `seed`;
/// how many it turned.
pub fn tensors_to_mxfp4(path: &Path, pick: impl Fn(&str) -> bool, seed: u64) -> usize {
    let bytes = std::fs::read(path).unwrap();
    let mut r = Reader { bytes: &bytes, at: 0 };
    assert_eq!(r.take(4), b"GGUF");
    let version = r.u32();
    let (n_tensors, n_kv) = (r.u64(), r.u64());
    let mut alignment = 32usize;
    for _ in 0..n_kv {
        let key = r.string();
        let t = r.u32();
        if key == "general.alignment" && t == 4 {
            alignment = r.u32() as usize;
        } else {
            r.skip_value(t);
        }
    }
    let metadata = bytes[24..r.at].to_vec();
    struct Info {
        name: String,
        dims: Vec<u64>,
        dtype: u32,
        offset: u64,
    }
    let infos: Vec<Info> = (0..n_tensors)
        .map(|_| {
            let name = r.string();
            let n = r.u32() as usize;
            let dims = (0..n).map(|_| r.u64()).collect();
            Info { name, dims, dtype: r.u32(), offset: r.u64() }
        })
        .collect();
    let data_start = r.at.div_ceil(alignment) * alignment;
    // Each tensor's bytes: to its successor's offset (or the file's end).
    let mut order: Vec<usize> = (0..infos.len()).collect();
    order.sort_by_key(|&i| infos[i].offset);
    let mut data: Vec<Vec<u8>> = vec![Vec::new(); infos.len()];
    for (k, &i) in order.iter().enumerate() {
        let start = data_start + infos[i].offset as usize;
        let end = order.get(k + 1).map_or(bytes.len(), |&j| data_start + infos[j].offset as usize);
        data[i] = bytes[start..end].to_vec();
    }
    let mut state = seed;
    let mut next = || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (state >> 33) as u8
    };
    let mut infos = infos;
    let mut turned = 0;
    for (info, data) in infos.iter_mut().zip(data.iter_mut()) {
        if !pick(&info.name) || info.dims[0] % 32 != 0 {
            continue;
        }
        let elems: u64 = info.dims.iter().product();
        let blocks = elems as usize / 32;
        let mut out = Vec::with_capacity(blocks * MXFP4_BLOCK_BYTES);
        for _ in 0..blocks {
            // Exponents 2^-15 … 2^-9 (halved): values of a few hundredths.
            out.push(113 + next() % 7);
            out.extend((0..16).map(|_| next()));
        }
        *data = out;
        info.dtype = MXFP4;
        turned += 1;
    }
    let mut file = Vec::new();
    file.extend_from_slice(b"GGUF");
    file.extend_from_slice(&version.to_le_bytes());
    file.extend_from_slice(&n_tensors.to_le_bytes());
    file.extend_from_slice(&n_kv.to_le_bytes());
    file.extend_from_slice(&metadata);
    let mut offset = 0u64;
    let mut offsets = Vec::new();
    for d in &data {
        offsets.push(offset);
        offset = (offset + d.len() as u64).div_ceil(alignment as u64) * alignment as u64;
    }
    for (info, &o) in infos.iter().zip(&offsets) {
        file.extend_from_slice(&(info.name.len() as u64).to_le_bytes());
        file.extend_from_slice(info.name.as_bytes());
        file.extend_from_slice(&(info.dims.len() as u32).to_le_bytes());
        for d in &info.dims {
            file.extend_from_slice(&d.to_le_bytes());
        }
        file.extend_from_slice(&info.dtype.to_le_bytes());
        file.extend_from_slice(&o.to_le_bytes());
    }
    file.resize(file.len().div_ceil(alignment) * alignment, 0);
    // Each tensor at its offset from the aligned start of the data.
    for d in &data {
        file.extend_from_slice(d);
        file.resize(file.len().div_ceil(alignment) * alignment, 0);
    }
    std::fs::write(path, file).unwrap();
    turned
}

/// Writes a copy of the GGUF file `from` at `to` with the string metadata
/// `key` set to `value` (the tensors as they were).
pub fn with_string(from: &Path, to: &Path, key: &str, value: &str) {
    let bytes = std::fs::read(from).unwrap();
    let mut r = Reader { bytes: &bytes, at: 0 };
    assert_eq!(r.take(4), b"GGUF");
    r.u32();
    let (n_tensors, n_kv) = (r.u64(), r.u64());
    let mut alignment = 32usize;
    let mut header = bytes[..24].to_vec();
    let mut found = false;
    for _ in 0..n_kv {
        let start = r.at;
        let k = r.string();
        let t = r.u32();
        if k == "general.alignment" && t == 4 {
            alignment = r.u32() as usize;
        } else {
            r.skip_value(t);
        }
        if k == key {
            assert_eq!(t, 8, "{key} is not a string");
            found = true;
            header.extend_from_slice(&(k.len() as u64).to_le_bytes());
            header.extend_from_slice(k.as_bytes());
            header.extend_from_slice(&8u32.to_le_bytes());
            header.extend_from_slice(&(value.len() as u64).to_le_bytes());
            header.extend_from_slice(value.as_bytes());
        } else {
            header.extend_from_slice(&bytes[start..r.at]);
        }
    }
    assert!(found, "no {key} in {}", from.display());
    let infos_start = r.at;
    for _ in 0..n_tensors {
        r.string();
        let n = r.u32() as usize;
        r.at += 8 * n + 4 + 8;
    }
    header.extend_from_slice(&bytes[infos_start..r.at]);
    let data_start = r.at.div_ceil(alignment) * alignment;
    header.resize(header.len().div_ceil(alignment) * alignment, 0);
    header.extend_from_slice(&bytes[data_start.min(bytes.len())..]);
    std::fs::write(to, header).unwrap();
}
