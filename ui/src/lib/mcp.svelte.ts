// MCP servers the user added: each one's state (running or not, its tools,
// why it last failed), adding one or a whole `mcpServers` file, removing,
// and connecting to see the tools.
import { api, asAppError } from './api';
import type { McpServerConfig } from './bindings/McpServerConfig';
import type { McpServerState } from './bindings/McpServerState';

export class McpStore {
  servers = $state<McpServerState[]>([]);
  /** Servers being started, by name. */
  connecting = $state<Record<string, boolean>>({});

  async load() {
    this.servers = await api.mcp.list();
  }

  /** Runs a change that returns the new list; its error in words, or null. */
  private async change(f: () => Promise<McpServerState[]>): Promise<string | null> {
    try {
      this.servers = await f();
      return null;
    } catch (e) {
      return asAppError(e).message;
    }
  }

  add(config: McpServerConfig) {
    return this.change(() => api.mcp.add(config));
  }

  importJson(json: string) {
    return this.change(() => api.mcp.importJson(json));
  }

  importFile(path: string) {
    return this.change(() => api.mcp.importFile(path));
  }

  remove(name: string) {
    return this.change(() => api.mcp.remove(name));
  }

  /** Starts `name` and lists its tools; a failure shows in its state too. */
  async connect(name: string): Promise<string | null> {
    this.connecting[name] = true;
    try {
      const error = await this.change(() => api.mcp.connect(name));
      if (error) await this.load();
      return error;
    } finally {
      this.connecting[name] = false;
    }
  }
}

/** `NAME=value` lines as an environment; the first bad line's error otherwise. */
export function parseLines(text: string, sep: '=' | ':'): Record<string, string> | string {
  const out: Record<string, string> = {};
  for (const [i, raw] of text.split('\n').entries()) {
    const line = raw.trim();
    if (!line) continue;
    const at = line.indexOf(sep);
    if (at <= 0) return `line ${i + 1} is not ${sep === '=' ? 'NAME=value' : 'Name: value'}`;
    out[line.slice(0, at).trim()] = line.slice(at + 1).trim();
  }
  return out;
}
