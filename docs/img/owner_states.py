"""Draw docs/img/owner_states.png: the owner thread's states in ft-brc,
who moves it between them, and where the help runs.  Not data: the
drawing of Include/internal/pycore_pystate.h's diagram with the moves the
series adds.  matplotlib only (no graphviz on the build machine).

    .venv/bin/python docs/img/owner_states.py
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

OUT = Path(__file__).resolve().parent / "owner_states.png"
OWNER = "tab:green"       # moves the owner makes itself
OTHER = "tab:blue"        # moves another thread makes

fig, ax = plt.subplots(figsize=(9.6, 5.6))
ax.set_xlim(-1, 101)
ax.set_ylim(0, 62)
ax.axis("off")

BOX_W, BOX_H, Y = 19, 8, 33
STATES = {"attached": 12, "detached": 50, "suspended": 88}  # centre x


def state(name, x, note):
    ax.add_patch(FancyBboxPatch((x - BOX_W / 2, Y - BOX_H / 2), BOX_W, BOX_H,
                                boxstyle="round,pad=0.4,rounding_size=1.5",
                                facecolor="#f2f2f2", edgecolor="black"))
    ax.text(x, Y + 1.3, name, ha="center", va="center", fontsize=12,
            weight="bold")
    ax.text(x, Y - 1.9, note, ha="center", va="center", fontsize=7.5)


def arrow(x1, y1, x2, y2, color, rad=0.0):
    ax.add_patch(FancyArrowPatch((x1, y1), (x2, y2), arrowstyle="-|>",
                                 mutation_scale=14, color=color, linewidth=1.6,
                                 connectionstyle="arc3,rad=%s" % rad))


def label(x, y, text, color, ha="center"):
    ax.text(x, y, text, ha=ha, va="center", fontsize=8, color=color,
            linespacing=1.25)


state("attached", STATES["attached"], "runs bytecode;\nmerges its own queue")
state("detached", STATES["detached"], "blocked: lock wait,\nsleep, I/O, C call")
state("suspended", STATES["suspended"], "cannot attach\nuntil moved back")

L, R = BOX_W / 2 + 0.5, BOX_W / 2 + 0.5
a, d, s = STATES["attached"], STATES["detached"], STATES["suspended"]

# attached <-> detached: only the owner
arrow(a + R, Y + 2, d - L, Y + 2, OWNER)
label((a + d) / 2, Y + 7,
      "owner blocks\n(ft-brc: asks for help if\nsomething is queued to it)",
      OWNER)
arrow(d - L, Y - 2, a + R, Y - 2, OWNER)
label((a + d) / 2, Y - 7,
      "owner wakes; at its next\ncheck it merges its queue\n(stock CPython)",
      OWNER)

# detached <-> suspended: another thread
arrow(d + R, Y + 2, s - L, Y + 2, OTHER)
label((d + s) / 2, Y + 7,
      "a stop-the-world pause, or\nthe dropping thread (the fix;\n"
      "CAS under the bucket lock)", OTHER)
arrow(s - L, Y - 2, d + R, Y - 2, OTHER)
label((d + s) / 2, Y - 7,
      "the same thread after the\npause or the merge (wakes the\n"
      "owner if it waits to attach)", OTHER)

# attached -> suspended: the owner at a safe point, for a pause
arrow(a, Y + BOX_H / 2 + 0.8, s, Y + BOX_H / 2 + 0.8, OWNER, rad=-0.36)
label(50, 56, "owner, at a safe point, when a stop-the-world pause asks",
      OWNER)

# where the help runs
ax.text(0, 17, "Where a blocked owner's dropped objects are merged and freed",
        fontsize=9, weight="bold", va="center")
rows = [
    ("ft-brc", "the dropped object inside its Py_DECREF, as with the GIL; "
     "the rest of the owner's queue at the dropper's next check;\n"
     "what an owner or dropper leaves queued as it blocks, or a pause "
     "held, by the first thread at a check."),
    ("ft-upstream", "inside the Py_DECREF that queued the object, with "
     "every other object of the owner's queue."),
    ("stock ft", "by the owner, at its first check after it wakes (or by "
     "the GC)."),
]
y = 13.5
for name, text in rows:
    ax.text(1, y, name, fontsize=8, weight="bold", va="top")
    ax.text(14, y, text, fontsize=8, va="top", linespacing=1.25)
    y -= 2.6 * (text.count("\n") + 1) + 1.2

ax.text(101, 61, "green: the owner moves itself; blue: another thread moves it",
        fontsize=7.5, ha="right", va="top", color="dimgrey")
fig.tight_layout()
fig.savefig(OUT, dpi=90)
print("wrote", OUT)
