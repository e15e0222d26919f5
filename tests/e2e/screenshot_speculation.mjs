// A reply that drafted, with its drafts in the stats line, and the settings
// panel's speculation controls (looked at before calling the UI done). Run
// under Xvfb with the app built; `--mtp` asks for the MTP head, which the
// default model lacks (the reply's error shows); `--draft` drafts with a draft model (the
// loaded model's own file, picked from the library):
//   Xvfb :98 -screen 0 1200x780x24 & DISPLAY=:98 node tests/e2e/screenshot_speculation.mjs OUT.png [--draft | --mtp]
import { execFileSync } from 'node:child_process';
import { Harness, newChat, send, setSetting, waitForReply } from './harness.mjs';

const out = process.argv[2] ?? '/tmp/speculation.png';
const h = new Harness();
await h.startDriver();
try {
  const d = await h.openApp();
  await newChat(d);
  await setSetting(d, 'temperature', 0);
  await setSetting(d, 'maxNewTokens', 80);
  if (process.argv.includes('--draft')) {
    const pick = (testid, value) => d.execute(
      'const s = document.querySelector(`[data-testid=${arguments[0]}]`); s.value = arguments[1]; s.dispatchEvent(new Event("change", { bubbles: true }));',
      [testid, value]);
    await pick('setting-speculation', 'draft');
    const model = await d.waitFor(
      () => d.execute('return [...document.querySelectorAll("[data-testid=setting-draftModel] option")].map((o) => o.value).find(Boolean);'),
      'the library listed as draft models');
    await pick('setting-draftModel', model);
  }
  const mtp = process.argv.includes('--mtp');
  if (mtp) {
    await d.execute(
      'const s = document.querySelector("[data-testid=setting-speculation]"); s.value = "mtp"; s.dispatchEvent(new Event("change", { bubbles: true }));');
  }
  await send(d, 'Repeat exactly, twice: the quick brown fox jumps over the lazy dog near the river bank.');
  if (mtp) {
    await new Promise((r) => setTimeout(r, 4000));
  } else {
    await waitForReply(d);
  }
  await d.find('[data-testid=setting-speculation]');
  await d.execute('document.querySelector("[data-testid=setting-speculation]").scrollIntoView({block: "center"})');
  await new Promise((r) => setTimeout(r, 500));
  execFileSync('/usr/bin/import', ['-window', 'root', out]);
  console.log(out);
} finally {
  await h.stop();
  process.exit(0);
}
