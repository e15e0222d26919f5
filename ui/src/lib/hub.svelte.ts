// Get models: Hub search, a repo's page (quants with their fit on this
// computer, its README), the download queue (which the shell sends whole on
// every change), the Hub token, and the models other apps keep here.
import { api } from './api';
import type { FoundModelRow } from './bindings/FoundModelRow';
import type { HubDownload } from './bindings/HubDownload';
import type { HubFit } from './bindings/HubFit';
import type { HubQuantFacts } from './bindings/HubQuantFacts';
import type { HubRepo } from './bindings/HubRepo';
import type { HubRepoSummary } from './bindings/HubRepoSummary';
import type { HubSort } from './bindings/HubSort';
import type { HubTokenStorage } from './bindings/HubTokenStorage';
import type { Guard } from './settings.svelte';

/** A quant's facts as they arrive: asked for, read, or why not. */
export type QuantFacts = { state: 'reading' } | { state: 'read'; facts: HubQuantFacts } | { state: 'failed'; error: string };

export class HubStore {
  /** Which view is shown in place of the conversation, if any. */
  view = $state<'search' | 'found' | null>(null);
  query = $state('');
  sort = $state<HubSort>('downloads');
  results = $state<HubRepoSummary[] | null>(null);
  searching = $state(false);
  /** The repo whose page is open. */
  repo = $state<HubRepo | null>(null);
  repoLoading = $state<string | null>(null);
  /** By the quant's first file, for the open repo. */
  quantFacts = $state<Record<string, QuantFacts>>({});
  downloads = $state<HubDownload[]>([]);
  token = $state<HubTokenStorage>('none');
  found = $state<FoundModelRow[] | null>(null);
  /** An error of this view (a refused search, a gated repo), shown in it. */
  error = $state<string | null>(null);
  /** Download ids this page started: their model opens in a new chat when done. */
  private started = new Set<number>();

  constructor(
    private guard: Guard,
    private onDownloaded: (download: HubDownload) => void,
  ) {}

  async show(view: 'search' | 'found') {
    this.view = view;
    this.error = null;
    if (view === 'search') {
      // Opened again, it starts from the results.
      this.closeRepo();
      this.token = (await this.guard(() => api.hub.tokenGet())) ?? this.token;
      const queue = await this.guard(() => api.hub.downloads());
      if (queue) this.downloads = queue;
      if (this.results === null) await this.search();
    } else {
      await this.findOnDisk();
    }
  }

  hide() {
    this.view = null;
  }

  async search() {
    this.searching = true;
    this.error = null;
    try {
      this.results = await api.hub.search(this.query, this.sort);
    } catch (e) {
      this.error = messageOf(e);
    } finally {
      this.searching = false;
    }
  }

  async openRepo(id: string) {
    this.repoLoading = id;
    this.error = null;
    try {
      const repo = await api.hub.repo(id);
      this.repo = repo;
      this.quantFacts = {};
      // Each quant's fit, read from its header: a few range requests each.
      for (const q of repo.quants) void this.readFacts(repo, q.first);
    } catch (e) {
      this.error = messageOf(e);
    } finally {
      this.repoLoading = null;
    }
  }

  closeRepo() {
    this.repo = null;
    this.quantFacts = {};
  }

  private async readFacts(repo: HubRepo, first: string) {
    this.quantFacts = { ...this.quantFacts, [first]: { state: 'reading' } };
    let next: QuantFacts;
    try {
      next = { state: 'read', facts: await api.hub.quantFacts(repo.summary.id, repo.commit, first) };
    } catch (e) {
      next = { state: 'failed', error: messageOf(e) };
    }
    if (this.repo?.commit === repo.commit) this.quantFacts = { ...this.quantFacts, [first]: next };
  }

  /** Downloads the model whose first file is `first`. */
  async download(first: string) {
    const repo = this.repo;
    if (!repo) return;
    this.error = null;
    try {
      const id = await api.hub.download(repo.summary.id, repo.commit, first);
      this.started.add(id);
    } catch (e) {
      this.error = messageOf(e);
    }
  }

  async act(id: number, action: 'pause' | 'resume' | 'cancel') {
    await this.guard(() => api.hub.downloadAct(id, action));
  }

  /** A `hub-downloads` event: the whole queue. */
  setDownloads(queue: HubDownload[]) {
    for (const d of queue) {
      if (d.state === 'done' && this.started.delete(d.id)) this.onDownloaded(d);
    }
    this.downloads = queue;
  }

  async setToken(token: string | null) {
    const storage = await this.guard(() => api.hub.tokenSet(token));
    if (storage) this.token = storage;
  }

  async findOnDisk() {
    this.found = null;
    this.found = (await this.guard(() => api.hub.findOnDisk())) ?? [];
  }

  /** Adds found models to the library, in place. */
  async addFound(paths: string[]): Promise<boolean> {
    const added = await this.guard(() => api.hub.addFound(paths));
    if (added === undefined) return false;
    await this.findOnDisk();
    return true;
  }
}

function messageOf(e: unknown): string {
  return e && typeof e === 'object' && 'message' in e ? String((e as { message: unknown }).message) : String(e);
}

/** "fits", "fits at 8k context", "too big for this computer". */
export function fitInWords(fit: HubFit): string {
  switch (fit.kind) {
    case 'fits':
      return 'fits';
    case 'fitsAt':
      return `fits at ${Math.round(fit.context / 1024)}k context`;
    case 'tooBig':
      return 'too big for this computer';
  }
}

/** "1.2 MB/s, 3 min left". */
export function rateInWords(d: Pick<HubDownload, 'downloaded' | 'total' | 'bytesPerSecond' | 'checking'>): string {
  if (d.checking) return 'checking the SHA-256…';
  if (d.bytesPerSecond <= 0) return '';
  const left = (d.total - d.downloaded) / d.bytesPerSecond;
  const eta = left >= 3600 ? `${(left / 3600).toFixed(1)} h` : left >= 60 ? `${Math.round(left / 60)} min` : `${Math.max(1, Math.round(left))} s`;
  return `${(d.bytesPerSecond / 1e6).toFixed(1)} MB/s, ${eta} left`;
}
