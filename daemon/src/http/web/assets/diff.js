// A simple line diff (longest common subsequence) for the edits agents make: Claude Code's
// Edit/MultiEdit/Write and OpenCode's edit/write inputs, shown as - and + lines.
import { h } from './dom.js';

// Lines each side at most before the diff gives up on alignment (all -, then all +).
const MAX_LINES = 400;

export function lineDiff(a, b) {
  const x = String(a ?? '').split('\n');
  const y = String(b ?? '').split('\n');
  if (a === '' || a === undefined || a === null) return y.map((l) => ['+', l]);
  if (x.length > MAX_LINES || y.length > MAX_LINES) {
    return [...x.map((l) => ['-', l]), ...y.map((l) => ['+', l])];
  }
  const n = x.length;
  const m = y.length;
  const lcs = Array.from({ length: n + 1 }, () => new Uint16Array(m + 1));
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      lcs[i][j] = x[i] === y[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
    }
  }
  const out = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (x[i] === y[j]) {
      out.push([' ', x[i]]);
      i++;
      j++;
    } else if (lcs[i + 1][j] >= lcs[i][j + 1]) {
      out.push(['-', x[i++]]);
    } else {
      out.push(['+', y[j++]]);
    }
  }
  while (i < n) out.push(['-', x[i++]]);
  while (j < m) out.push(['+', y[j++]]);
  return out;
}

// The file an edit touches and its before/after pairs, or null for a tool that edits nothing.
export function editOf(tool, input) {
  if (!input || typeof input !== 'object') return null;
  const t = String(tool || '').toLowerCase();
  const file = input.file_path ?? input.filePath ?? input.path;
  const pair = (o) => [o.old_string ?? o.oldString ?? '', o.new_string ?? o.newString ?? ''];
  if (t === 'edit' && ('old_string' in input || 'oldString' in input)) {
    return { file, pairs: [pair(input)] };
  }
  if (t === 'multiedit' && Array.isArray(input.edits)) {
    return { file, pairs: input.edits.map(pair) };
  }
  if (t === 'write' && typeof input.content === 'string') {
    return { file, pairs: [['', input.content]] };
  }
  return null;
}

export function renderDiff(edit) {
  const box = h('div.diff');
  edit.pairs.forEach(([before, after], k) => {
    if (k > 0) box.append(h('div.diff-sep', '⋯'));
    const pre = h('pre.diff-lines');
    for (const [mark, line] of lineDiff(before, after)) {
      const cls = mark === '+' ? 'add' : mark === '-' ? 'del' : 'ctx';
      pre.append(h(`span.${cls}`, `${mark} ${line}\n`));
    }
    box.append(pre);
  });
  return box;
}
