// The model: its status as the shell reports it, the files opened before,
// and the default model's download.
import { api } from './api';
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
  /** Counts model-status events, so a status query answered late cannot undo a newer event. */
  private statusEvents = 0;

  constructor(private guard: Guard) {}

  /** How the loaded model's template marks thinking, if it does. */
  get reasoning(): ReasoningFormat | null {
    return this.status.state === 'ready' ? (this.status.reasoning ?? null) : null;
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
    if (status.state === 'ready') void api.models.recent().then((r) => (this.recent = r));
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
