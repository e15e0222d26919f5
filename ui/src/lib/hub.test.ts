import { clearMocks, mockIPC } from '@tauri-apps/api/mocks';
import { afterEach, describe, expect, it } from 'vitest';
import type { HubDownload } from './bindings/HubDownload';
import { fitInWords, HubStore, rateInWords } from './hub.svelte';

function download(over: Partial<HubDownload>): HubDownload {
  return { id: 1, repo: 'org/m', quant: 'Q4_K_M', state: 'running', downloaded: 0, total: 100, bytesPerSecond: 0, checking: false, error: null, path: null, ...over };
}

function store() {
  const opened: HubDownload[] = [];
  const s = new HubStore(
    async (f) => {
      try {
        return await f();
      } catch {
        return undefined;
      }
    },
    (d) => opened.push(d),
  );
  return { s, opened };
}

afterEach(() => clearMocks());

describe('get models in words', () => {
  it('says the fit, the rate and the time left', () => {
    expect(fitInWords({ kind: 'fits', context: 32768 })).toBe('fits');
    expect(fitInWords({ kind: 'fitsAt', context: 8192 })).toBe('fits at 8k context');
    expect(fitInWords({ kind: 'tooBig' })).toBe('too big for this computer');
    expect(rateInWords(download({ downloaded: 0, total: 120e6, bytesPerSecond: 2e6 }))).toBe('2.0 MB/s, 1 min left');
    expect(rateInWords(download({ downloaded: 90e6, total: 100e6, bytesPerSecond: 1e6 }))).toBe('1.0 MB/s, 10 s left');
    expect(rateInWords(download({ checking: true }))).toBe('checking the SHA-256…');
    expect(rateInWords(download({ bytesPerSecond: 0 }))).toBe('');
  });
});

describe('the download queue', () => {
  it('opens a chat for a download this page started, once, and not for others', async () => {
    mockIPC((cmd) => (cmd === 'hub_download' ? 7 : null));
    const { s, opened } = store();
    s.repo = { summary: { id: 'org/m', downloads: 0, likes: 0, lastModified: null, license: null, gated: false }, commit: 'c', quants: [], projectors: [], readme: null };
    await s.download('m-Q4_K_M.gguf');
    s.setDownloads([download({ id: 7, state: 'running' }), download({ id: 8, state: 'done', path: '/x' })]);
    expect(opened).toEqual([]);
    s.setDownloads([download({ id: 7, state: 'done', path: '/m.gguf' })]);
    s.setDownloads([download({ id: 7, state: 'done', path: '/m.gguf' })]);
    expect(opened.map((d) => d.id)).toEqual([7]);
    expect(s.downloads).toHaveLength(1);
  });

  it('shows a refused search in the view', async () => {
    mockIPC((cmd) => {
      if (cmd === 'hub_search') throw { kind: 'download', message: 'cannot reach http://hub: refused' };
      return null;
    });
    const { s } = store();
    await s.search();
    expect(s.error).toBe('cannot reach http://hub: refused');
    expect(s.searching).toBe(false);
  });
});
