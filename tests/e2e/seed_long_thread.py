"""Writes a conversation of N messages straight into a Hearth database, for
the long-thread test. Usage: seed_long_thread.py DB N"""
import sqlite3
import sys
import time

db = sqlite3.connect(sys.argv[1])
n = int(sys.argv[2])
now = int(time.time() * 1000)
cur = db.execute(
    "INSERT INTO conversations(title, created_at, updated_at, settings) VALUES (?, ?, ?, '{}')",
    ("Long thread", now, now),
)
conversation = cur.lastrowid
parent = None
for i in range(n):
    if i % 2 == 0:
        role, content = "user", f"Question {i // 2}: how do I sort a list in Python?"
    else:
        role = "assistant"
        content = (
            f"Answer {i // 2}. Use **sorted()** for a new list or `list.sort()` in place:\n\n"
            "```python\nnumbers = [3, 1, 2]\nprint(sorted(numbers))\nnumbers.sort(reverse=True)\n```\n\n"
            "- `key=` picks what to compare\n- `reverse=True` sorts descending\n"
        )
    cur = db.execute(
        "INSERT INTO messages(conversation_id, parent_id, role, content, status, created_at) VALUES (?, ?, ?, ?, 'complete', ?)",
        (conversation, parent, role, content, now),
    )
    parent = cur.lastrowid
db.execute("UPDATE conversations SET active_leaf = ? WHERE id = ?", (parent, conversation))
db.commit()
print(conversation)
