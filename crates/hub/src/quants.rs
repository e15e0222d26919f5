//! A repo's GGUF files as the models a user picks between: one per quant,
//! the parts of a split file counted as one, vision projectors (`mmproj`)
//! named apart.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::api::RepoFile;

/// One model file of a repo, in one or more parts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Quant {
    /// The quant as the file names it (`Q4_K_M`, `UD-Q4_K_XL`, `MXFP4`), or
    /// the file's name where it names none.
    pub name: String,
    /// Its parts in order (one unless split).
    pub files: Vec<RepoFile>,
    /// The parts' bytes together.
    pub size: u64,
}

impl Quant {
    /// The path that names the model (its first part).
    pub fn first(&self) -> &str {
        &self.files[0].path
    }
}

/// The GGUF models in `files`, smallest first, and the vision projectors.
pub fn group_quants(files: &[RepoFile]) -> (Vec<Quant>, Vec<RepoFile>) {
    let mut projectors = Vec::new();
    let mut groups: BTreeMap<String, Vec<(u32, RepoFile)>> = BTreeMap::new();
    for file in files {
        let Some(stem) = file.path.strip_suffix(".gguf") else { continue };
        let name = stem.rsplit('/').next().unwrap_or(stem);
        if name.to_ascii_lowercase().contains("mmproj") {
            projectors.push(file.clone());
            continue;
        }
        let (key, number) = match split_suffix(stem) {
            Some((model, number, count)) => (format!("{model}\u{0}{count}"), number),
            None => (stem.to_string(), 1),
        };
        groups.entry(key).or_default().push((number, file.clone()));
    }
    let mut quants: Vec<Quant> = groups
        .into_iter()
        .filter_map(|(key, mut parts)| {
            parts.sort_by_key(|(n, _)| *n);
            let count = key.split_once('\u{0}').and_then(|(_, c)| c.parse::<u32>().ok()).unwrap_or(1);
            // A split model with a part missing from the listing is not offered whole.
            if parts.len() as u32 != count || parts.iter().enumerate().any(|(i, (n, _))| *n != i as u32 + 1) {
                return None;
            }
            let model = key.split('\u{0}').next().unwrap_or(&key).to_string();
            let files: Vec<RepoFile> = parts.into_iter().map(|(_, f)| f).collect();
            let size = files.iter().fold(0u64, |sum, f| sum.saturating_add(f.size));
            Some(Quant { name: quant_name(&model), size, files })
        })
        .collect();
    // Two models of one quant (`x-Q4_K_M`, `x-abliterated-Q4_K_M`) go by
    // their file names, so no two rows read the same.
    let names: Vec<String> = quants.iter().map(|q| q.name.clone()).collect();
    for q in &mut quants {
        if names.iter().filter(|n| **n == q.name).count() > 1 {
            let first = q.first().strip_suffix(".gguf").unwrap_or(q.first());
            q.name = split_suffix(first).map_or(first, |(model, _, _)| model).to_string();
        }
    }
    quants.sort_by(|a, b| a.size.cmp(&b.size).then_with(|| a.name.cmp(&b.name)));
    (quants, projectors)
}

/// The quant file `path` names (a part of a split model names its model's).
pub(crate) fn quant_of(path: &str) -> String {
    let stem = path.strip_suffix(".gguf").unwrap_or(path);
    quant_name(split_suffix(stem).map_or(stem, |(model, _, _)| model))
}

/// `model-00002-of-00003` as (`model`, 2, 3).
fn split_suffix(stem: &str) -> Option<(&str, u32, u32)> {
    let (rest, count) = stem.rsplit_once("-of-")?;
    let (model, number) = rest.rsplit_once('-')?;
    let digits = |s: &str| s.len() >= 5 && s.bytes().all(|b| b.is_ascii_digit());
    (digits(number) && digits(count)).then_some(())?;
    Some((model, number.parse().ok()?, count.parse().ok()?))
}

/// The quant a file's name (or its folder's) gives: the last `-` or `.`
/// separated word that starts as llama.cpp's type names do.
fn quant_name(model: &str) -> String {
    let mut segments = model.rsplit('/');
    let file = segments.next().unwrap_or(model);
    find_quant(file).or_else(|| segments.next().and_then(find_quant)).unwrap_or_else(|| file.to_string())
}

fn find_quant(name: &str) -> Option<String> {
    let words: Vec<&str> = name.split(['-', '.']).collect();
    let is_quant = |w: &str| {
        let w = w.to_ascii_uppercase();
        let numbered =
            |prefix: &str| w.strip_prefix(prefix).is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()));
        numbered("Q")
            || numbered("IQ")
            || numbered("TQ")
            || ["F16", "F32", "BF16", "MXFP4"].contains(&w.as_str())
            || w.starts_with("MXFP4_")
    };
    let at = words.iter().rposition(|w| is_quant(w))?;
    let word = words[at].to_ascii_uppercase();
    // Unsloth's dynamic quants: `UD-Q4_K_XL`.
    Some(if at > 0 && words[at - 1].eq_ignore_ascii_case("UD") { format!("UD-{word}") } else { word })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, size: u64) -> RepoFile {
        RepoFile { path: path.into(), size, sha256: None }
    }

    #[test]
    fn groups_parts_names_quants_and_sets_projectors_apart() {
        let files = [
            file("README.md", 1),
            file("Qwen3-8B-Q4_K_M.gguf", 50),
            file("Qwen3-8B-UD-Q4_K_XL.gguf", 55),
            file("Qwen3-8B.Q8_0.gguf", 90),
            file("BF16/Qwen3-8B-BF16-00002-of-00002.gguf", 80),
            file("BF16/Qwen3-8B-BF16-00001-of-00002.gguf", 100),
            file("Q6_K/model-00001-of-00002.gguf", 30),
            file("Q6_K/model-00002-of-00002.gguf", 40),
            file("broken-00001-of-00003.gguf", 5),
            file("mmproj-F16.gguf", 7),
        ];
        let (quants, projectors) = group_quants(&files);
        let (twins, _) = group_quants(&[file("x-Q4_K_M.gguf", 1), file("x-abliterated-Q4_K_M.gguf", 2)]);
        let twins: Vec<&str> = twins.iter().map(|q| q.name.as_str()).collect();
        assert_eq!(twins, ["x-Q4_K_M", "x-abliterated-Q4_K_M"]);
        let names: Vec<(&str, u64, usize)> = quants.iter().map(|q| (q.name.as_str(), q.size, q.files.len())).collect();
        assert_eq!(
            names,
            [("Q4_K_M", 50, 1), ("UD-Q4_K_XL", 55, 1), ("Q6_K", 70, 2), ("Q8_0", 90, 1), ("BF16", 180, 2)]
        );
        assert_eq!(quants[4].first(), "BF16/Qwen3-8B-BF16-00001-of-00002.gguf");
        assert_eq!(projectors, [file("mmproj-F16.gguf", 7)]);
    }
}
