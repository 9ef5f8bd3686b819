#!/usr/bin/env python3
"""Draws the training loss of one or more runs from their metrics.jsonl as an SVG (for
docs/stability.md: a run that rolls back from an injected spike next to a clean one).
Each run is a polyline in the order its steps ran, so a rollback shows as the line
going back; steps with an intervention are marked in red.

Usage: scripts/loss_curve_svg.py OUT.svg LABEL=metrics.jsonl [LABEL=metrics.jsonl ...]
"""
import json
import sys

W, H, PAD = 760, 360, 50
COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c"]


def read(path):
    steps, events = [], []
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if "event" in r:
                events.append(r["step"])
            elif "loss" in r and isinstance(r["loss"], (int, float)):
                steps.append((r["step"], r["loss"]))
    return steps, events


def main():
    out, runs = sys.argv[1], [a.split("=", 1) for a in sys.argv[2:]]
    data = [(label, *read(path)) for label, path in runs]
    xs = [s for _, steps, _ in data for s, _ in steps]
    ys = [l for _, steps, _ in data for _, l in steps]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    sx = lambda x: PAD + (x - x0) / (x1 - x0) * (W - 2 * PAD)
    sy = lambda y: H - PAD - (y - y0) / (y1 - y0) * (H - 2 * PAD)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
             f'<rect width="{W}" height="{H}" fill="white"/>',
             f'<line x1="{PAD}" y1="{H-PAD}" x2="{W-PAD}" y2="{H-PAD}" stroke="black"/>',
             f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{H-PAD}" stroke="black"/>',
             f'<text x="{W/2}" y="{H-12}" text-anchor="middle">step</text>',
             f'<text x="14" y="{H/2}" transform="rotate(-90 14 {H/2})" text-anchor="middle">training loss</text>']
    for i in range(5):
        y = y0 + (y1 - y0) * i / 4
        parts.append(f'<text x="{PAD-6}" y="{sy(y)+4}" text-anchor="end">{y:.1f}</text>')
        x = x0 + (x1 - x0) * i / 4
        parts.append(f'<text x="{sx(x)}" y="{H-PAD+16}" text-anchor="middle">{x:.0f}</text>')
    for k, (label, steps, events) in enumerate(data):
        colour = COLOURS[k % len(COLOURS)]
        pts = " ".join(f"{sx(s):.1f},{sy(l):.1f}" for s, l in steps)
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{pts}"/>')
        parts.append(f'<text x="{W-PAD-200}" y="{PAD+16*k}" fill="{colour}">{label}</text>')
        loss_at = {}
        for s, l in steps:
            loss_at.setdefault(s, []).append(l)
        for e in events:  # at the step's worst loss (a rolled-back step ran twice)
            if e in loss_at:
                parts.append(f'<circle cx="{sx(e):.1f}" cy="{sy(max(loss_at[e])):.1f}" r="4" fill="red"/>')
    parts.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(parts) + "\n")


if __name__ == "__main__":
    main()
