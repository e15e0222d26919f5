// The model: its status as the shell reports it, the files opened before
// (the Models view's library, with each file's header facts), and the
// default model's download.
import { api } from './api';
import type { LibraryFacts } from './bindings/LibraryFacts';
import type { LibraryModel } from './bindings/LibraryModel';
import type { ModelStatus } from './bindings/ModelStatus';
import type { ReasoningFormat } from './bindings/ReasoningFormat';
import type { RecentModel } from './bindings/RecentModel';
import type { Guard } from './settings.svelte';

export interface Download {
  downloaded: number;
  total: number | null;
  extracting: boolean;
  error: string | null;
}

export class ModelStore {
  status = $state<ModelStatus>({ state: 'none' });
  recent = $state<RecentModel[]>([]);
  /** The default model's download, while one runs or after it failed. */
  download = $state<Download | null>(null);
  /** The Models view's list, once read (null before and while first reading). */
  library = $state<LibraryModel[] | null>(null);
  /** Whether the Models view is shown in place of the conversation. */
  libraryOpen = $state(false);
  /** Conversation id → the loaded model's path when the user chose to go on
   *  with it rather than switch back to the conversation's own model. */
  keptCurrent = $state<Record<number, string>>({});
  /** Counts model-status events, so a status query answered late cannot undo a newer event. */
  private statusEvents = 0;

  constructor(private guard: Guard) {}

  /** How the loaded model's template marks thinking, if it does. */
  get reasoning(): ReasoningFormat | null {
    return this.status.state === 'ready' ? (this.status.reasoning ?? null) : null;
  }

  /** The model file loaded now, if one is ready. */
  get loadedPath(): string | null {
    return this.status.state === 'ready' ? this.status.path : null;
  }

  /** A model's name as the list knows it, else its file name without `.gguf`. */
  nameOf(path: string): string {
    return this.recent.find((m) => m.path === path)?.name ?? this.library?.find((m) => m.path === path)?.name ?? modelFileName(path);
  }

  /** Call after subscribing to model-status events. */
  async load() {
    const seen = this.statusEvents;
    const status = await api.models.status();
    if (this.statusEvents === seen) this.status = status;
    this.recent = await api.models.recent();
  }

  /** A model-status event. */
  setStatus(status: ModelStatus) {
    this.statusEvents += 1;
    this.status = status;
    if (status.state === 'ready') {
      void api.models.recent().then((r) => (this.recent = r));
      if (this.libraryOpen) void this.loadLibrary();
    }
  }

  async showLibrary() {
    this.libraryOpen = true;
    await this.loadLibrary();
  }

  hideLibrary() {
    this.libraryOpen = false;
  }

  async loadLibrary() {
    const library = await this.guard(() => api.models.library());
    if (library) this.library = library;
  }

  /** Removes a model from the list, deleting its file only when asked. */
  async forget(path: string, deleteFile: boolean): Promise<boolean> {
    const done = await this.guard(() => api.models.forget(path, deleteFile).then(() => true));
    if (!done) return false;
    this.library = this.library?.filter((m) => m.path !== path) ?? null;
    this.recent = this.recent.filter((m) => m.path !== path);
    return true;
  }

  /** The conversation's own model, when another one is loaded and the user
   *  has not chosen to go on with it; null otherwise. */
  mismatch(conversationId: number, modelPath: string | null): { path: string; name: string; current: string } | null {
    const loaded = this.loadedPath;
    if (!modelPath || !loaded || modelPath === loaded || this.keptCurrent[conversationId] === loaded) return null;
    return { path: modelPath, name: this.nameOf(modelPath), current: this.status.state === 'ready' ? this.status.name : modelFileName(loaded) };
  }

  /** Go on with the loaded model in this conversation: its next turn reads the history afresh. */
  keepCurrent(conversationId: number) {
    const loaded = this.loadedPath;
    if (loaded) this.keptCurrent = { ...this.keptCurrent, [conversationId]: loaded };
  }

  async open(path: string) {
    await this.guard(() => api.models.open(path));
  }

  async downloadDefault() {
    this.download = { downloaded: 0, total: null, extracting: false, error: null };
    const d = this.download;
    const ended = await this.guard(() =>
      api.models.downloadDefault((e) => {
        if (!this.download) return;
        switch (e.event) {
          case 'progress':
            this.download.downloaded = e.data.downloaded;
            this.download.total = e.data.total;
            break;
          case 'extracting':
            this.download.extracting = true;
            break;
          case 'done':
            this.download = null;
            break;
          case 'failed':
            this.download.error = e.data.error.message;
            break;
        }
      }).then(() => true),
    );
    // Refused outright (the error is shown): nothing to show progress for.
    if (ended === undefined && this.download === d) this.download = null;
  }

  async cancelDownload() {
    await this.guard(() => api.models.cancelDownload());
  }
}

/** A path's file name without `.gguf`. */
export function modelFileName(path: string): string {
  const file = path.split(/[\\/]/).pop() ?? path;
  return file.replace(/\.gguf$/i, '') || path;
}

/** A parameter count the way model names say it: 135M, 1.5B, 7B. */
export function paramsInWords(n: number): string {
  const [unit, scale] = n >= 1e9 ? ['B', 1e9] : n >= 1e6 ? ['M', 1e6] : n >= 1e3 ? ['K', 1e3] : ['', 1];
  const v = n / scale;
  return `${v >= 10 || unit === '' ? Math.round(v) : Number(v.toFixed(1))}${unit}`;
}

/** Total parameters, and for a mixture of experts the ones a token runs:
 *  "30.5B · 3.3B active (8 of 128 experts)"; for Gemma 4's E models those
 *  without the per-layer table, as Google names them: "5.1B · 2.3B effective". */
export function parametersInWords(
  facts: Pick<
    LibraryFacts,
    'parameterCount' | 'activeParameterCount' | 'expertCount' | 'expertsUsed' | 'perLayerEmbeddingParameters'
  >,
): string {
  const total = paramsInWords(facts.parameterCount);
  if (facts.expertCount === null || facts.expertsUsed === null) {
    if (facts.perLayerEmbeddingParameters > 0) {
      return `${total} · ${paramsInWords(facts.parameterCount - facts.perLayerEmbeddingParameters)} effective`;
    }
    return total;
  }
  return `${total} · ${paramsInWords(facts.activeParameterCount)} active (${facts.expertsUsed} of ${facts.expertCount} experts)`;
}

/** Each tensor type's share of the bytes: "Q4_1 69% · Q8_0 31% · F32 <1%". */
export function sharesInWords(facts: Pick<LibraryFacts, 'quantTypes'>): string {
  return facts.quantTypes
    .map((q) => {
      const pct = q.fraction * 100;
      return `${q.name} ${pct > 0 && pct < 1 ? '<1' : Math.round(pct)}%`;
    })
    .join(' · ');
}

/** Bytes in decimal units: 98.4 MB, 1.2 GB. */
export function bytesInWords(n: number): string {
  if (n >= 1e9) return `${(n / 1e9).toFixed(1)} GB`;
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)} MB`;
  if (n >= 1e3) return `${Math.round(n / 1e3)} KB`;
  return `${n} B`;
}

/** The context a conversation runs with: its setting (0 is the model's), at most the model's own. */
export function contextFor(facts: Pick<LibraryFacts, 'contextLength'>, setting: number | null | undefined): number {
  return setting ? Math.min(setting, facts.contextLength) : facts.contextLength;
}

type MemoryFacts = Pick<LibraryFacts, 'tensorBytes' | 'kvBytesPerToken' | 'recurrentStateBytes' | 'checkpointEvery' | 'maxCheckpoints'>;

/** A hybrid's recurrent state at `context` positions: the state and its
 *  checkpoints (one per prompt chunk, up to the cap), as the engine keeps them. */
export function recurrentAt(facts: Omit<MemoryFacts, 'tensorBytes' | 'kvBytesPerToken'>, context: number): number {
  if (facts.recurrentStateBytes === 0) return 0;
  const checkpoints = Math.min(facts.maxCheckpoints, Math.floor(context / Math.max(1, facts.checkpointEvery)) + 1);
  return facts.recurrentStateBytes * (1 + checkpoints);
}

/** Weights plus the f16 KV cache at `context` positions, and a hybrid's state and checkpoints. */
export function memoryAt(facts: MemoryFacts, context: number): number {
  return facts.tensorBytes + facts.kvBytesPerToken * context + recurrentAt(facts, context);
}

/** "≈ 0.3 GB at 8,192 tokens". */
export function memoryInWords(facts: MemoryFacts & Pick<LibraryFacts, 'contextLength'>, setting?: number | null): string {
  const context = contextFor(facts, setting);
  const gb = memoryAt(facts, context) / 1e9;
  return `≈ ${gb < 10 ? gb.toFixed(1) : Math.round(gb)} GB at ${context.toLocaleString('en-US')} tokens`;
}
