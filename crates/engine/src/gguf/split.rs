//! Models split into parts, as `llama-gguf-split` writes them (files over
//! about 50 GB come so from the Hub): `name-00001-of-00003.gguf` and on,
//! each a GGUF file of its own holding some of the tensors. The first holds
//! the model's metadata; every part says `split.no` (from 0),
//! `split.count` and `split.tensors.count` (the model's whole count).
//!
//! A model in parts is opened as one: from whichever part the user picked,
//! every part is found by its name and checked (none missing, none from
//! another model, no tensor twice), and a failure names the part.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::{GgufFile, Header, Part, Value};
use crate::error::{EngineError, Result};

/// Where a file sits in a model split into parts, read from its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitPart {
    /// The model's first part, which names the model.
    pub first: PathBuf,
    /// This file's number, from 1.
    pub number: u32,
    pub count: u32,
}

impl SplitPart {
    /// Every part's path, in order.
    pub fn paths(&self) -> Vec<PathBuf> {
        (1..=self.count).map(|n| part_path(&self.first, n, self.count)).collect()
    }
}

/// `…-00002-of-00003.gguf` as part 2 of 3; `None` for a name not so made
/// (a model in one file, or parts renamed by hand).
pub fn split_part(path: &Path) -> Option<SplitPart> {
    let name = path.file_name()?.to_str()?;
    let stem = name.strip_suffix(".gguf")?;
    let (rest, count) = stem.rsplit_once("-of-")?;
    let (_, number) = rest.rsplit_once('-')?;
    let digits = |s: &str| s.len() >= 5 && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(number) || !digits(count) {
        return None;
    }
    let (number, count): (u32, u32) = (number.parse().ok()?, count.parse().ok()?);
    if number == 0 || number > count {
        return None;
    }
    Some(SplitPart { first: part_path(path, 1, count), number, count })
}

/// The path of part `number` of `count` beside `any_part` (named as
/// llama.cpp names them: five digits at least).
fn part_path(any_part: &Path, number: u32, count: u32) -> PathBuf {
    let name = any_part.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let stem = name.strip_suffix(".gguf").unwrap_or(name);
    let prefix = stem.rsplit_once("-of-").and_then(|(rest, _)| rest.rsplit_once('-')).map_or(stem, |(p, _)| p);
    any_part.with_file_name(format!("{prefix}-{number:05}-of-{count:05}.gguf"))
}

/// A file's `split.no` and `split.count` (0 and 1 for a model in one file).
fn numbers(path: &Path, metadata: &HashMap<String, Value>) -> Result<(u32, u32)> {
    let int = |key: &str| -> Result<Option<u32>> {
        match metadata.get(key) {
            None => Ok(None),
            Some(Value::U16(v)) => Ok(Some(u32::from(*v))),
            Some(Value::U32(v)) => Ok(Some(*v)),
            Some(Value::I32(v)) if *v >= 0 => Ok(Some(*v as u32)),
            Some(Value::U8(v)) => Ok(Some(u32::from(*v))),
            Some(v) => Err(split_error(path, format!("its {key} is {v:?}, not a count"))),
        }
    };
    let count = int("split.count")?.unwrap_or(1).max(1);
    let number = int("split.no")?.unwrap_or(0);
    if number >= count {
        return Err(split_error(path, format!("it says it is part {} of {count}", number + 1)));
    }
    Ok((number, count))
}

fn split_error(path: &Path, reason: String) -> EngineError {
    EngineError::SplitModel { path: path.to_path_buf(), reason }
}

/// The whole model that `part` (just opened, with its header) belongs to.
pub(super) fn gather(opened: Part, (metadata, tensors): Header) -> Result<GgufFile> {
    let (number, count) = numbers(&opened.path, &metadata)?;
    if count == 1 {
        return Ok(GgufFile { path: opened.path.clone(), len: opened.len, parts: vec![opened], metadata, tensors });
    }
    let Some(named) = split_part(&opened.path) else {
        return Err(split_error(
            &opened.path,
            format!(
                "it is part {} of {count}, but its name does not end in -{:05}-of-{count:05}.gguf, so its other \
                 parts cannot be found",
                number + 1,
                number + 1
            ),
        ));
    };
    if named.count != count || named.number != number + 1 {
        return Err(split_error(
            &opened.path,
            format!(
                "its name says part {} of {}, its header part {} of {count}",
                named.number,
                named.count,
                number + 1
            ),
        ));
    }
    // Whichever part was picked, the model is read from its first.
    let (first, (metadata, mut tensors)) = if number == 0 {
        (opened, (metadata, tensors))
    } else {
        drop(opened);
        let (first, header) = open_part(&named.first, 0, count)?;
        (first, header)
    };
    let expected_tensors = tensor_count(&first.path, &metadata)?;
    let mut parts = vec![first];
    for (i, path) in named.paths().into_iter().enumerate().skip(1) {
        let (part, (part_metadata, part_tensors)) = open_part(&path, i as u32, count)?;
        if let (Some(expected), Some(says)) = (expected_tensors, tensor_count(&path, &part_metadata)?) {
            if says != expected {
                return Err(split_error(
                    &path,
                    format!("it belongs to a model of {says} tensors, and part 1 to one of {expected}"),
                ));
            }
        }
        for (name, mut info) in part_tensors {
            if tensors.contains_key(&name) {
                return Err(split_error(&path, format!("tensor {name} is also in an earlier part")));
            }
            info.part = i;
            tensors.insert(name, info);
        }
        parts.push(part);
    }
    if let Some(expected) = expected_tensors {
        if tensors.len() != expected as usize {
            return Err(split_error(
                &parts[0].path,
                format!("its {count} parts hold {} tensors, and it says {expected}", tensors.len()),
            ));
        }
    }
    let len = parts.iter().map(|p| p.len).sum();
    Ok(GgufFile { path: parts[0].path.clone(), parts, len, metadata, tensors })
}

impl GgufFile {
    /// The headers of a model's parts (from `read_header`, in order) as
    /// one model's, checked as `open` checks the files; one header alone is
    /// returned as it is.
    pub fn join_headers(mut headers: Vec<GgufFile>) -> Result<GgufFile> {
        if headers.len() <= 1 {
            return headers.pop().ok_or_else(|| split_error(Path::new(""), "no parts were given".into()));
        }
        let count = headers.len() as u32;
        let mut model = headers.remove(0);
        let (number, first_count) = numbers(&model.path, &model.metadata)?;
        if number != 0 || first_count != count {
            return Err(split_error(
                &model.path,
                format!("it says part {} of {first_count}, not 1 of {count}", number + 1),
            ));
        }
        let expected = tensor_count(&model.path, &model.metadata)?;
        for (i, part) in headers.into_iter().enumerate() {
            let index = i as u32 + 1;
            let (number, part_count) = numbers(&part.path, &part.metadata)?;
            if number != index || part_count != count {
                return Err(split_error(
                    &part.path,
                    format!("it says part {} of {part_count}, not {} of {count}", number + 1, index + 1),
                ));
            }
            for (name, mut info) in part.tensors {
                if model.tensors.contains_key(&name) {
                    return Err(split_error(&part.path, format!("tensor {name} is also in an earlier part")));
                }
                info.part = index as usize;
                model.tensors.insert(name, info);
            }
            model.len += part.len;
        }
        if let Some(expected) = expected {
            if model.tensors.len() != expected as usize {
                return Err(split_error(
                    &model.path,
                    format!("its {count} parts hold {} tensors, and it says {expected}", model.tensors.len()),
                ));
            }
        }
        Ok(model)
    }
}

/// Opens part `index` (from 0) of `count`, and checks that it says so.
fn open_part(path: &Path, index: u32, count: u32) -> Result<(Part, Header)> {
    if !path.exists() {
        return Err(split_error(path, format!("part {} of {count} is missing", index + 1)));
    }
    let (part, header) = Part::open(path)?;
    let (number, part_count) = numbers(path, &header.0)?;
    if part_count != count || number != index {
        return Err(split_error(
            path,
            format!(
                "it should be part {} of {count}, but its header says part {} of {part_count}: it is from another model",
                index + 1,
                number + 1
            ),
        ));
    }
    Ok((part, header))
}

/// `split.tensors.count`, where a part gives it.
fn tensor_count(path: &Path, metadata: &HashMap<String, Value>) -> Result<Option<u32>> {
    match metadata.get("split.tensors.count") {
        None => Ok(None),
        Some(Value::I32(v)) if *v >= 0 => Ok(Some(*v as u32)),
        Some(Value::U32(v)) => Ok(Some(*v)),
        Some(Value::U16(v)) => Ok(Some(u32::from(*v))),
        Some(v) => Err(split_error(path, format!("its split.tensors.count is {v:?}, not a count"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_part_numbers_from_llama_cpp_names() {
        let p = split_part(Path::new("/m/gpt-oss-120b-mxfp4-00002-of-00003.gguf")).unwrap();
        assert_eq!(p.first, Path::new("/m/gpt-oss-120b-mxfp4-00001-of-00003.gguf"));
        assert_eq!((p.number, p.count), (2, 3));
        assert_eq!(p.paths()[2], Path::new("/m/gpt-oss-120b-mxfp4-00003-of-00003.gguf"));
        for not_split in
            ["m.gguf", "m-1-of-3.gguf", "m-00004-of-00003.gguf", "m-00000-of-00003.gguf", "m-00001-of-00003"]
        {
            assert_eq!(split_part(Path::new(not_split)), None, "{not_split}");
        }
    }
}
