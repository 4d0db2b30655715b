// dstream's web view: hash routes (#/ sessions, #/session/<id>?lsn=N, #/pending, #/usage), the
// keyboard, the help, and what to do when the login is gone.
import * as api from './api.js';
import { h, clear, setText } from './dom.js';
import { sessionsView } from './sessions.js';
import { sessionView } from './session.js';
import { pendingView, startRing, decideFocused, notifyButton } from './checkpoints.js';
import { usageView } from './usage.js';

const main = document.getElementById('main');
const banner = document.getElementById('banner');
let view = null;
// `/` on another page: the sessions page's search box takes the focus once it is built.
let focusSearch = false;

api.onAuthLost(() => {
  banner.hidden = false;
  clear(banner).append(
    h('strong', 'Not logged in. '),
    'This page needs a login link from the daemon: run ',
    h('code', 'dstream open'),
    ' in a terminal, and open the link it prints.',
  );
});

function route() {
  if (view && view.stop) view.stop();
  view = null;
  const hash = location.hash.replace(/^#/, '') || '/';
  const [path, query] = hash.split('?');
  const params = new URLSearchParams(query || '');
  const parts = path.split('/').filter(Boolean);
  for (const a of document.querySelectorAll('nav a')) {
    a.classList.toggle('current', a.dataset.route === (parts[0] || 'sessions'));
  }
  if (parts[0] === 'session' && parts[1]) {
    const id = decodeURIComponent(parts[1]);
    view = sessionView(main, id, params);
    setBase(`dstream · ${id}`);
  } else if (parts[0] === 'pending') {
    view = { stop: pendingView(main) };
    setBase('dstream · pending');
  } else if (parts[0] === 'usage') {
    view = usageView(main);
    setBase('dstream · usage');
  } else {
    view = sessionsView(main, params);
    setBase('dstream');
  }
  const search = focusSearch && document.getElementById('search');
  focusSearch = false;
  if (search) search.focus();
  else main.focus({ preventScroll: true });
}

// The title without the pending count, which the ring keeps in front of it.
function setBase(t) {
  const m = /^\(\d+\) /.exec(document.title);
  document.title = (m ? m[0] : '') + t;
}

// ---- the keyboard ----

function typing(el) {
  if (!el) return false;
  if (el.tagName === 'TEXTAREA' || el.tagName === 'SELECT' || el.isContentEditable) return true;
  return el.tagName === 'INPUT' && !['range', 'checkbox', 'radio', 'button', 'submit'].includes(el.type);
}

function items() {
  return [...main.querySelectorAll('.item')].filter((el) => el.offsetParent !== null);
}

function move(dir) {
  const all = items();
  if (!all.length) return;
  const at = all.indexOf(document.activeElement.closest ? document.activeElement.closest('.item') : null);
  const next = at < 0 ? (dir > 0 ? 0 : all.length - 1) : Math.max(0, Math.min(all.length - 1, at + dir));
  all[next].focus();
  all[next].scrollIntoView({ block: 'nearest' });
}

function nextPending() {
  const boxes = [...main.querySelectorAll('.decide.pending')].filter((el) => el.offsetParent !== null);
  if (!boxes.length) return;
  const current = document.activeElement;
  const later = (b) =>
    current && current.compareDocumentPosition(b) & Node.DOCUMENT_POSITION_FOLLOWING && !current.contains(b);
  const after = boxes.find(later);
  const box = after || boxes[0];
  const item = box.closest('.item') || box;
  item.focus();
  item.scrollIntoView({ block: 'center' });
}

const help = document.getElementById('help');

document.addEventListener('keydown', (e) => {
  if (e.ctrlKey || e.metaKey || e.altKey) return;
  if (e.key === 'Escape') {
    if (!help.hidden) help.hidden = true;
    else if (typing(document.activeElement)) document.activeElement.blur();
    return;
  }
  if (typing(e.target)) return;
  if (e.target.type === 'range' && (e.key === 'ArrowLeft' || e.key === 'ArrowRight')) return;
  if (view && view.onKey && view.onKey(e)) {
    e.preventDefault();
    return;
  }
  const onControl = e.target.closest && e.target.closest('button, a, summary');
  let done = true;
  switch (e.key) {
    case '?':
      help.hidden = !help.hidden;
      break;
    case '/': {
      const box = document.getElementById('search');
      if (box) box.focus();
      else {
        focusSearch = true;
        location.hash = '#/';
      }
      break;
    }
    case 'j':
    case 'ArrowDown':
      move(1);
      break;
    case 'k':
    case 'ArrowUp':
      move(-1);
      break;
    case 'Enter': {
      if (onControl) return;
      const item = document.activeElement.closest && document.activeElement.closest('.item');
      if (item && item.dataset.href) location.hash = item.dataset.href;
      else done = false;
      break;
    }
    case 'a':
      done = decideFocused('approve');
      break;
    case 'r':
      done = decideFocused('reject');
      break;
    case 'n':
      nextPending();
      break;
    case 's':
      location.hash = '#/';
      break;
    case 'p':
      location.hash = '#/pending';
      break;
    case 'u':
      location.hash = '#/usage';
      break;
    default:
      done = false;
  }
  if (done) e.preventDefault();
});

document.getElementById('help-close').addEventListener('click', () => (help.hidden = true));
document.getElementById('help-open').addEventListener('click', () => (help.hidden = !help.hidden));

// ---- start ----

window.addEventListener('hashchange', route);
(async () => {
  try {
    const me = await api.whoami();
    setText(document.getElementById('user'), me && me.user ? me.user : '');
  } catch (e) {
    if (e instanceof api.AuthError) return;
  }
  const n = notifyButton();
  if (n) document.getElementById('tools').prepend(n);
  startRing();
  route();
})();
