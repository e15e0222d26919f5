// The context meter and the overflow policies, in a chat with a small context.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Harness, lastReply, messages, newChat, send, setSetting, waitForReply } from './harness.mjs';

const h = new Harness({ port: 4474 });
let d;

describe('context accounting', () => {
  before(async () => {
    await h.startDriver();
    d = await h.openApp();
  });
  after(async () => {
    await h.stop();
  });

  it('counts the draft and drops the middle when the chat outgrows the context', async () => {
    await newChat(d);
    await setSetting(d, 'temperature', 0);
    await setSetting(d, 'maxNewTokens', 16);
    await setSetting(d, 'contextLength', 200);
    const meter = async () => d.find('[data-testid=context-meter]');
    const prompt = async () => Number(await (await meter()).attr('data-prompt'));
    await d.waitFor(async () => Number(await (await meter()).attr('data-context')) === 200, 'the meter to use the new context');
    const empty = await prompt();
    const box = await d.find('[data-testid=composer]');
    await box.type('How many legs does a spider have?');
    await d.waitFor(async () => (await prompt()) > empty, 'the meter to count the draft');
    await box.type('\uE007');
    await waitForReply(d);

    // Pick "drop the middle", then keep talking until turns are left out.
    // Set the native <select> as its change event would (clicking it opens a GTK popup the driver cannot use).
    await d.find('[data-testid=setting-overflow]');
    await d.execute("const s = document.querySelector('[data-testid=setting-overflow]'); s.value = 'truncateMiddle'; s.dispatchEvent(new Event('change', { bubbles: true }));");
    await new Promise((r) => setTimeout(r, 400));
    let dropped = 0;
    for (let i = 0; i < 8 && dropped === 0; i++) {
      const shown = (await messages(d)).length;
      await send(d, `Tell me one fact about the number ${i + 2}, in one sentence please.`);
      // Until the turn shows, the last reply on the page is the one before.
      await d.waitFor(async () => (await messages(d)).length > shown, 'the new turn', 60000);
      const stats = await waitForReply(d);
      const text = await stats.text();
      const m = text.match(/left out (\d+) earlier messages/);
      dropped = m ? Number(m[1]) : 0;
      assert.notEqual(await stats.attr('data-finish'), 'error', text);
    }
    assert.ok(dropped > 0, 'some turns were left out');
    // The first turn is still what the model sees first: the meter predicts drops for the next message.
    await (await d.find('[data-testid=composer]')).type('And another one?');
    await d.waitFor(async () => Number(await (await meter()).attr('data-dropped')) > 0, 'the meter to say what would be dropped');
    assert.match(await (await d.find('[data-testid=meter-drops]')).text(), /truncate middle/);
    assert.ok((await prompt()) <= 200);
    assert.ok(await lastReply(d));
  });
});
