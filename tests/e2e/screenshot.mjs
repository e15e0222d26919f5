// Makes docs/screenshot.png: two conversations, a streamed Markdown reply
// with code, and the settings panel. Run under Xvfb with the app built:
//   Xvfb :98 -screen 0 1200x780x24 & DISPLAY=:98 node tests/e2e/screenshot.mjs
import { execFileSync } from 'node:child_process';
import { resolve } from 'node:path';
import { Harness, newChat, send, setSetting, waitForReply } from './harness.mjs';

const out = resolve(import.meta.dirname, '../../docs/screenshot.png');
const h = new Harness();
await h.startDriver();
try {
  const d = await h.openApp();
  await newChat(d);
  await setSetting(d, 'temperature', 0);
  await send(d, 'What is the capital of France?');
  await waitForReply(d);
  await newChat(d);
  await setSetting(d, 'temperature', 0);
  await setSetting(d, 'maxNewTokens', 200);
  await send(d, 'Write a Python function that checks whether a number is prime.');
  await waitForReply(d);
  await new Promise((r) => setTimeout(r, 500));
  execFileSync('/usr/bin/import', ['-window', 'root', out]);
  console.log(out);
} finally {
  await h.stop();
  // Sockets of the driver's HTTP client may linger; the work is done.
  process.exit(0);
}
