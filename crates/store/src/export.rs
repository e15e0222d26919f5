//! Conversations as files: the whole tree as versioned JSON
//! (`docs/export-format.md`), the shown branch as Markdown, a backup of
//! every conversation, and plain OpenAI-style message lists.
//!
//! Messages refer to their parents by position in the file, never by
//! database id, so exporting an imported conversation gives the same JSON
//! apart from `exportedAt`. Imports are checked whole before anything is
//! written, and written in one transaction: a bad file changes nothing.

use std::collections::HashSet;

use rusqlite::params;
use serde::{Deserialize, Serialize};

use crate::error::{Result, StoreError};
use crate::messages::{MessageStatus, ReplyStats, Role};
use crate::settings::ConversationSettings;
use crate::store::{now_ms, Store};

/// One conversation's whole message tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConversationExport {
    /// Always `hearth-conversation`.
    pub format: String,
    pub version: u32,
    /// Milliseconds since 1970; the only field that differs between two
    /// exports of the same conversation.
    #[serde(default)]
    pub exported_at: i64,
    pub title: String,
    pub created_at: i64,
    pub updated_at: i64,
    pub settings: ConversationSettings,
    /// The shown branch's last message, by position in `messages`.
    pub active_leaf: Option<usize>,
    /// Parents before children.
    pub messages: Vec<ExportedMessage>,
}

/// A message, its parent by position in the export.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExportedMessage {
    pub parent: Option<usize>,
    pub role: Role,
    pub content: String,
    pub status: MessageStatus,
    /// How a reply was produced, its replay record included where there is one.
    #[serde(default)]
    pub stats: Option<ReplyStats>,
    pub created_at: i64,
    /// The tool calls a reply made, with their results; absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<crate::ToolCallRecord>,
}

/// Every conversation, for a backup.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Backup {
    /// Always `hearth-backup`.
    pub format: String,
    pub version: u32,
    #[serde(default)]
    pub exported_at: i64,
    pub conversations: Vec<ConversationExport>,
}

impl ConversationExport {
    pub const FORMAT: &'static str = "hearth-conversation";
    pub const VERSION: u32 = 1;
}

impl Backup {
    pub const FORMAT: &'static str = "hearth-backup";
    pub const VERSION: u32 = 1;
}

/// The largest file an import reads.
pub const MAX_IMPORT_BYTES: usize = 256 << 20;
/// The most messages one imported conversation may hold.
pub const MAX_IMPORT_MESSAGES: usize = 1_000_000;

/// What an import file turned out to hold.
#[derive(Debug, Clone, PartialEq)]
pub enum Import {
    Conversations(Vec<ConversationExport>),
}

/// What an import did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ImportReport {
    /// The conversations created, in the file's order.
    pub imported: Vec<i64>,
    /// Conversations the database already held exactly, so not added again.
    pub skipped_duplicates: usize,
}

/// A plain message as OpenAI's chat API and many tools write them.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlainMessage {
    role: Role,
    content: String,
    #[serde(default)]
    #[allow(dead_code, reason = "read so that a file with the field parses; the name is not kept")]
    name: Option<String>,
}

fn invalid(msg: impl Into<String>) -> StoreError {
    StoreError::Invalid(msg.into())
}

impl Import {
    /// Reads a Hearth conversation, a Hearth backup, or a plain
    /// `[{role, content}]` list; anything else, and anything newer than
    /// this build knows, is refused with the reason.
    pub fn parse(bytes: &[u8]) -> Result<Self> {
        if bytes.len() > MAX_IMPORT_BYTES {
            return Err(invalid(format!(
                "the file is {} MB; imports are limited to {} MB",
                bytes.len() >> 20,
                MAX_IMPORT_BYTES >> 20
            )));
        }
        let value: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| invalid(format!("the file is not JSON: {e}")))?;
        let conversations = match &value {
            serde_json::Value::Array(_) => {
                let plain: Vec<PlainMessage> = serde_json::from_value(value)
                    .map_err(|e| invalid(format!("the file is a list, but not of {{role, content}} messages: {e}")))?;
                vec![from_plain(plain)?]
            }
            serde_json::Value::Object(o) => {
                let format = o.get("format").and_then(|f| f.as_str()).unwrap_or("");
                let version = o.get("version").and_then(|v| v.as_u64()).unwrap_or(0);
                let (known, current) = match format {
                    ConversationExport::FORMAT => (true, ConversationExport::VERSION),
                    Backup::FORMAT => (true, Backup::VERSION),
                    _ => (false, 0),
                };
                if !known {
                    return Err(invalid("the file is not a Hearth export (its \"format\" is neither hearth-conversation nor hearth-backup)"));
                }
                if version > current as u64 {
                    return Err(invalid(format!("the file was written by a newer Hearth ({format} version {version}; this build reads up to {current})")));
                }
                if version == 0 {
                    return Err(invalid("the file has no valid \"version\""));
                }
                if format == Backup::FORMAT {
                    let b: Backup =
                        serde_json::from_value(value).map_err(|e| invalid(format!("the backup is malformed: {e}")))?;
                    b.conversations
                } else {
                    vec![serde_json::from_value(value)
                        .map_err(|e| invalid(format!("the conversation is malformed: {e}")))?]
                }
            }
            _ => return Err(invalid("the file holds neither a Hearth export nor a list of messages")),
        };
        for c in &conversations {
            c.check()?;
        }
        Ok(Import::Conversations(conversations))
    }
}

fn from_plain(plain: Vec<PlainMessage>) -> Result<ConversationExport> {
    if plain.is_empty() {
        return Err(invalid("the list holds no messages"));
    }
    let now = now_ms();
    let messages: Vec<ExportedMessage> = plain
        .into_iter()
        .enumerate()
        .map(|(i, m)| ExportedMessage {
            parent: i.checked_sub(1),
            role: m.role,
            content: m.content,
            status: MessageStatus::Complete,
            stats: None,
            created_at: now,
            tool_calls: Vec::new(),
        })
        .collect();
    let title = messages
        .iter()
        .find(|m| m.role == Role::User)
        .map(|m| crate::conversations::title_from(&m.content))
        .unwrap_or_default();
    Ok(ConversationExport {
        format: ConversationExport::FORMAT.into(),
        version: ConversationExport::VERSION,
        exported_at: 0,
        title,
        created_at: now,
        updated_at: now,
        settings: ConversationSettings::default(),
        active_leaf: Some(messages.len() - 1),
        messages,
    })
}

impl ConversationExport {
    /// Everything an import relies on: parents before children, a leaf
    /// that exists, settings in range.
    fn check(&self) -> Result<()> {
        let n = self.messages.len();
        if n > MAX_IMPORT_MESSAGES {
            return Err(invalid(format!(
                "\"{}\" holds {n} messages; at most {MAX_IMPORT_MESSAGES} are imported",
                self.title
            )));
        }
        for (i, m) in self.messages.iter().enumerate() {
            if !m.tool_calls.is_empty() && m.role != Role::Assistant {
                return Err(invalid(format!("message {i} of \"{}\" holds tool calls but is not a reply", self.title)));
            }
            if let Some(p) = m.parent {
                if p >= i {
                    return Err(invalid(format!(
                        "message {i} of \"{}\" names parent {p}, which does not come before it",
                        self.title
                    )));
                }
            }
        }
        if let Some(leaf) = self.active_leaf {
            if leaf >= n {
                return Err(invalid(format!("\"{}\" shows message {leaf}, but holds {n}", self.title)));
            }
        }
        let errors = self.settings.validate();
        if !errors.is_empty() {
            let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
            return Err(invalid(format!("\"{}\" has settings out of range: {}", self.title, fields.join(", "))));
        }
        Ok(())
    }

    /// The same conversation apart from when it was exported.
    fn content_key(&self) -> String {
        let mut c = self.clone();
        c.exported_at = 0;
        serde_json::to_string(&c).expect("exports serialise")
    }
}

impl Store {
    /// A conversation's whole tree, every version and branch.
    pub fn export_conversation(&self, id: i64) -> Result<ConversationExport> {
        let c = self.conversation(id)?;
        let settings = self.conversation_settings(id)?;
        let leaf: Option<i64> =
            self.conn.query_row("SELECT active_leaf FROM conversations WHERE id = ?1", [id], |r| r.get(0))?;
        let all = self.messages_of(id)?;
        let position: std::collections::HashMap<i64, usize> = all.iter().enumerate().map(|(i, m)| (m.id, i)).collect();
        let messages = all
            .iter()
            .map(|m| {
                Ok(ExportedMessage {
                    parent: m.parent_id.and_then(|p| position.get(&p).copied()),
                    role: m.role,
                    content: m.content.clone(),
                    status: m.status,
                    stats: m.stats.clone(),
                    created_at: m.created_at,
                    tool_calls: if m.role == Role::Assistant { self.tool_calls(m.id)? } else { Vec::new() },
                })
            })
            .collect::<Result<_>>()?;
        Ok(ConversationExport {
            format: ConversationExport::FORMAT.into(),
            version: ConversationExport::VERSION,
            exported_at: now_ms(),
            title: c.title,
            created_at: c.created_at,
            updated_at: c.updated_at,
            settings,
            active_leaf: leaf.and_then(|l| position.get(&l).copied()),
            messages,
        })
    }

    /// Every conversation not in the trash.
    pub fn backup(&self) -> Result<Backup> {
        let conversations =
            self.conversations()?.iter().map(|c| self.export_conversation(c.id)).collect::<Result<_>>()?;
        Ok(Backup { format: Backup::FORMAT.into(), version: Backup::VERSION, exported_at: now_ms(), conversations })
    }

    /// The shown branch as Markdown: the title, then each message under its role.
    pub fn export_markdown(&self, id: i64) -> Result<String> {
        let c = self.conversation(id)?;
        let title = if c.title.is_empty() { "Untitled conversation" } else { &c.title };
        let mut out = format!("# {title}\n");
        for t in self.thread(id)? {
            let m = t.message;
            let role = match m.role {
                Role::System => "System",
                Role::User => "User",
                Role::Assistant => "Assistant",
            };
            let note = match m.status {
                MessageStatus::Interrupted => " (interrupted)",
                MessageStatus::Error => " (error)",
                _ => "",
            };
            out.push_str(&format!("\n## {role}{note}\n\n{}\n", m.content.trim_end()));
            for c in &t.tool_calls {
                let status = crate::messages::enum_text(&c.status);
                out.push_str(&format!(
                    "\n**Tool call** `{}` ({status})\n\n```json\n{}\n```\n\n```text\n{}\n```\n",
                    c.name,
                    c.arguments,
                    c.result.trim_end()
                ));
            }
        }
        Ok(out)
    }

    /// Adds the file's conversations, all or none. A conversation the
    /// database already holds exactly (a backup imported twice) is skipped.
    pub fn import(&self, import: &Import) -> Result<ImportReport> {
        let Import::Conversations(list) = import;
        let mut existing: HashSet<String> = HashSet::new();
        for c in self.conversations()? {
            existing.insert(self.export_conversation(c.id)?.content_key());
        }
        let mut report = ImportReport::default();
        let tx = self.conn.unchecked_transaction()?;
        for c in list {
            let key = c.content_key();
            if existing.contains(&key) {
                report.skipped_duplicates += 1;
                continue;
            }
            tx.execute(
                "INSERT INTO conversations(title, created_at, updated_at, settings) VALUES (?1, ?2, ?3, ?4)",
                params![c.title, c.created_at, c.updated_at, serde_json::to_string(&c.settings)?],
            )?;
            let conversation_id = tx.last_insert_rowid();
            let mut ids: Vec<i64> = Vec::with_capacity(c.messages.len());
            for m in &c.messages {
                // A reply that was streaming when exported cannot still be.
                let status = if m.status == MessageStatus::Streaming { MessageStatus::Interrupted } else { m.status };
                tx.execute(
                    "INSERT INTO messages(conversation_id, parent_id, role, content, status, stats, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                    params![
                        conversation_id,
                        m.parent.map(|p| ids[p]),
                        crate::messages::enum_text(&m.role),
                        m.content,
                        crate::messages::enum_text(&status),
                        m.stats.as_ref().map(serde_json::to_string).transpose()?,
                        m.created_at
                    ],
                )?;
                let id = tx.last_insert_rowid();
                // A call that was waiting or running when exported cannot still be.
                let calls: Vec<crate::ToolCallRecord> = m
                    .tool_calls
                    .iter()
                    .map(|c| match c.status {
                        crate::ToolCallStatus::Pending => {
                            crate::ToolCallRecord { status: crate::ToolCallStatus::Stopped, ..c.clone() }
                        }
                        _ => c.clone(),
                    })
                    .collect();
                crate::tool_calls::insert_tool_calls(&tx, id, &calls)?;
                ids.push(id);
            }
            tx.execute(
                "UPDATE conversations SET active_leaf = ?1 WHERE id = ?2",
                params![c.active_leaf.map(|l| ids[l]), conversation_id],
            )?;
            existing.insert(key);
            report.imported.push(conversation_id);
        }
        tx.commit()?;
        Ok(report)
    }
}
