// The shell's commands, grouped by feature, over the calls generated from
// the Rust signatures (bindings/commands.ts). Every failure is an AppError
// ({kind, message}); generation events stream over a Channel.
import { Channel } from '@tauri-apps/api/core';
import * as commands from './bindings/commands';
import type { AppError } from './bindings/AppError';
import type { Backend } from './bindings/Backend';
import type { CacheBudgets } from './bindings/CacheBudgets';
import type { ConversationSettings } from './bindings/ConversationSettings';
import type { DownloadAction } from './bindings/DownloadAction';
import type { DownloadEvent } from './bindings/DownloadEvent';
import type { HubSort } from './bindings/HubSort';
import type { McpServerConfig } from './bindings/McpServerConfig';
import type { ToolDecision } from './bindings/ToolDecision';
import type { ExportFormat } from './bindings/ExportFormat';
import type { GenerationEvent } from './bindings/GenerationEvent';
import type { Preset } from './bindings/Preset';

export type { ExportFormat };

export type OnEvent = (event: GenerationEvent) => void;

/** Whatever a command threw, as an AppError. */
export function asAppError(e: unknown): AppError {
  if (e && typeof e === 'object' && 'kind' in e && 'message' in e) return e as AppError;
  return { kind: 'internal', message: String(e) };
}

function channel(onEvent: OnEvent): Channel<GenerationEvent> {
  const ch = new Channel<GenerationEvent>();
  ch.onmessage = onEvent;
  return ch;
}

export const api = {
  app: {
    startupError: () => commands.appStartupError(),
    moveDatabaseAside: () => commands.appMoveDatabaseAside(),
  },
  conversations: {
    list: () => commands.conversationsList(),
    search: (query: string) => commands.conversationsSearch(query),
    create: () => commands.conversationsCreate(),
    rename: (id: number, title: string) => commands.conversationsRename(id, title),
    delete: (id: number) => commands.conversationsDelete(id),
    restore: (id: number) => commands.conversationsRestore(id),
    thread: (id: number) => commands.conversationsThread(id),
    cacheStates: () => commands.conversationsCacheStates(),
    selectVersion: (id: number, messageId: number) =>
      commands.conversationsSelectVersion(id, messageId),
    backend: (id: number) => commands.conversationsBackend(id),
    setBackend: (id: number, backend: Backend) => commands.conversationsSetBackend(id, backend),
    exportTo: (id: number, format: ExportFormat, path: string) => commands.conversationsExport(id, format, path),
    /** Every conversation in one JSON file; how many were written. */
    backup: (path: string) => commands.conversationsBackup(path),
    /** A JSON export, a backup, a plain `[{role, content}]` list or a `.hearth` bundle. */
    importFrom: (path: string) => commands.conversationsImport(path),
  },
  endpoints: {
    list: () => commands.endpointsList(),
    add: (name: string, baseUrl: string, apiKey: string | null, allowPlainText: boolean) =>
      commands.endpointsAdd(name, baseUrl, apiKey, allowPlainText),
    setKey: (id: number, apiKey: string | null, allowPlainText: boolean) =>
      commands.endpointsSetKey(id, apiKey, allowPlainText),
    models: (id: number) => commands.endpointsModels(id),
    remove: (id: number) => commands.endpointsRemove(id),
  },
  mcp: {
    list: () => commands.mcpServersList(),
    add: (config: McpServerConfig) => commands.mcpServersAdd(config),
    /** An `mcpServers` JSON text (Claude Desktop, LM Studio, VS Code). */
    importJson: (json: string) => commands.mcpServersImport(json),
    importFile: (path: string) => commands.mcpServersImportFile(path),
    remove: (name: string) => commands.mcpServersRemove(name),
    /** Starts the server if it is not running and lists its tools. */
    connect: (name: string) => commands.mcpServersConnect(name),
  },
  chat: {
    send: (conversationId: number, text: string, variants: number, onEvent: OnEvent) =>
      commands.chatSend(conversationId, text, variants, channel(onEvent)),
    regenerate: (conversationId: number, replyId: number, variants: number, onEvent: OnEvent) =>
      commands.chatRegenerate(conversationId, replyId, variants, channel(onEvent)),
    edit: (conversationId: number, messageId: number, text: string, onEvent: OnEvent) =>
      commands.chatEdit(conversationId, messageId, text, channel(onEvent)),
    continue: (conversationId: number, replyId: number, onEvent: OnEvent) =>
      commands.chatContinue(conversationId, replyId, channel(onEvent)),
    replay: (conversationId: number, replyId: number, onEvent: OnEvent) =>
      commands.chatReplay(conversationId, replyId, channel(onEvent)),
    /** The user's answer to a tool call waiting for approval. */
    decideTool: (conversationId: number, callId: string, decision: ToolDecision) =>
      commands.chatToolDecide(conversationId, callId, decision),
    exportReplay: (conversationId: number, replyId: number, path: string) =>
      commands.chatExportReplay(conversationId, replyId, path),
    tokenChoices: (conversationId: number, replyId: number) =>
      commands.chatTokenChoices(conversationId, replyId),
    continueWith: (conversationId: number, replyId: number, index: number, token: number, onEvent: OnEvent) =>
      commands.chatContinueWith(conversationId, replyId, index, token, channel(onEvent)),
    stop: (conversationId: number) => commands.chatStop(conversationId),
    busy: () => commands.chatBusy(),
    contextUsage: (conversationId: number, draft: string) =>
      commands.chatContextUsage(conversationId, draft),
  },
  settings: {
    get: (conversationId: number) => commands.settingsGet(conversationId),
    set: (conversationId: number, settings: ConversationSettings) =>
      commands.settingsSet(conversationId, settings),
    validate: (settings: ConversationSettings) => commands.settingsValidate(settings),
    defaults: () => commands.settingsDefaultsGet(),
    setDefaults: (settings: ConversationSettings) => commands.settingsDefaultsSet(settings),
    presets: () => commands.presetsList(),
    savePreset: (preset: Preset) => commands.presetsSave(preset),
    deletePreset: (name: string) => commands.presetsDelete(name),
    clearCaches: () => commands.cachesClear(),
    budgets: () => commands.cachesBudgetsGet(),
    setBudgets: (budgets: CacheBudgets) => commands.cachesBudgetsSet(budgets),
    device: () => commands.deviceGet(),
    setDevice: (device: string) => commands.deviceSet(device),
    apiServer: () => commands.apiServerGet(),
    setApiServer: (enabled: boolean, port: number) => commands.apiServerSet(enabled, port),
    newApiKey: () => commands.apiServerNewKey(),
  },
  models: {
    status: () => commands.modelsStatus(),
    open: (path: string) => commands.modelsOpen(path),
    recent: () => commands.modelsRecent(),
    /** The models opened before, with their header facts (or why they cannot be read). */
    library: () => commands.modelsLibrary(),
    /** Removes a model from the list; deletes its file only when `deleteFile`. */
    forget: (path: string, deleteFile: boolean) => commands.modelsForget(path, deleteFile),
    downloadDefault: (onEvent: (e: DownloadEvent) => void) => {
      const ch = new Channel<DownloadEvent>();
      ch.onmessage = onEvent;
      return commands.modelsDownloadDefault(ch);
    },
    cancelDownload: () => commands.modelsDownloadCancel(),
  },
  hub: {
    search: (query: string, sort: HubSort) => commands.hubSearch(query, sort),
    /** A repo's quants, projectors and README. */
    repo: (repo: string) => commands.hubRepo(repo),
    /** A quant's header facts and fit, read over HTTP ranges. */
    quantFacts: (repo: string, commit: string, first: string) => commands.hubQuantFacts(repo, commit, first),
    /** Queues the model whose first file is `first`. */
    download: (repo: string, commit: string, first: string) => commands.hubDownload(repo, commit, first),
    downloadAct: (id: number, action: DownloadAction) => commands.hubDownloadAct(id, action),
    downloads: () => commands.hubDownloads(),
    tokenGet: () => commands.hubTokenGet(),
    tokenSet: (token: string | null) => commands.hubTokenSet(token),
    /** Models in other apps' folders on this computer. */
    findOnDisk: () => commands.modelsFindOnDisk(),
    addFound: (paths: string[]) => commands.modelsAddFound(paths),
  },
};
