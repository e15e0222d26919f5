// Starting up when something is wrong: a damaged database gets an error
// screen that can move it aside (keeping it), and a second Hearth on the
// same data folder changes nothing in the first one: it shows the first
// one's window and exits, or, with no D-Bus session to find it by, says
// that the folder is in use.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Harness, appBinary, messages, newChat, openChat, send, setSetting, waitForReply } from './harness.mjs';

const h = new Harness({ port: 4484 });
let d;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

describe('start-up', () => {
  before(async () => {
    await h.startDriver();
  });
  after(async () => {
    await h.stop();
  });

  it('a damaged database gets an error screen, and moving it aside starts fresh', async () => {
    writeFileSync(join(h.dataDir, 'hearth.db'), 'this is not a database '.repeat(400));
    d = await h.openApp({ waitForModel: false });
    const screen = await d.find('[data-testid=startup-error]', 30000);
    assert.match(await (await d.find('[data-testid=startup-error-message]')).text(), /damaged|not a Hearth database/);
    await (await d.find('[data-testid=move-database-aside]')).click();
    await d.waitFor(async () => (await d.$('[data-testid=startup-error]')) === null, 'the app to start fresh', 30000);
    assert.ok(screen);
    await d.waitFor(
      async () => (await (await d.find('[data-testid=model-status]')).attr('data-state')) === 'ready',
      'the model to load',
      120000,
    );
    const kept = readdirSync(h.dataDir).filter((f) => /^hearth\.db\.broken-\d+$/.test(f));
    assert.equal(kept.length, 1, `the old database is kept: ${readdirSync(h.dataDir)}`);
  });

  it('a second Hearth on the same data folder leaves the first one alone', async () => {
    const keep = await newChat(d);
    await setSetting(d, 'maxNewTokens', 8);
    await send(d, 'Hello there.');
    await waitForReply(d);
    const doomed = await newChat(d);
    await send(d, 'Delete me.');
    await waitForReply(d);
    await (await d.find(`[data-testid=conversation][data-id="${doomed}"] [data-testid=delete-conversation]`)).click();
    await d.find('[data-testid=undo-toast]');
    // While the Undo is offered, launch Hearth again on the same folder.
    assert.ok(process.env.DBUS_SESSION_BUS_ADDRESS, 'run under a D-Bus session (tests/e2e/run.sh starts one)');
    const second = spawn(appBinary, [], { env: { ...process.env, HEARTH_DATA_DIR: h.dataDir }, stdio: 'ignore' });
    const code = await Promise.race([new Promise((r) => second.once('exit', r)), sleep(15000).then(() => 'still running')]);
    if (code === 'still running') second.kill('SIGKILL');
    assert.equal(code, 0, 'the second launch hands over to the first and exits');
    const shown = await d.find('[data-testid=app]');
    assert.equal(await shown.attr('data-other-launches'), '1', 'the first window was shown instead');
    // With no session bus to find the first one by, the data-folder lock refuses.
    const third = spawn(appBinary, [], {
      env: { ...process.env, HEARTH_DATA_DIR: h.dataDir, DBUS_SESSION_BUS_ADDRESS: 'unix:path=/nonexistent/bus' },
      stdio: 'ignore',
    });
    await sleep(4000);
    const stillRunning = third.exitCode === null;
    third.kill('SIGKILL');
    assert.ok(stillRunning, 'the third one opens a window that says why it cannot start, rather than crashing');
    await (await d.find('[data-testid=undo-delete]')).click();
    await openChat(d, doomed);
    assert.ok((await messages(d)).length >= 2, 'Undo still brings the conversation back');
    await openChat(d, keep);
    const r = await waitForReply(d);
    assert.notEqual(await r.attr('data-finish'), 'interrupted', 'the first one’s replies are untouched');
    assert.ok(existsSync(join(h.dataDir, 'hearth.lock')));
  });
});
