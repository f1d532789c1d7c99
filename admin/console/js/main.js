// The console's shell: layout, navigation and the `#/...` router. Each page is a function that
// answers the page's nodes; pages reach the server only through `/api/v1` (js/api.js).
import { h, clear } from './dom.js';
import { currentSession, onSession, post, setSession } from './api.js';
import { announce, btn, errorBox } from './widgets.js';
import * as auth from './pages/auth.js';
import * as org from './pages/org.js';
import * as keys from './pages/keys.js';
import * as policy from './pages/policy.js';
import * as analytics from './pages/analytics.js';
import * as webhooks from './pages/webhooks.js';
import * as prompts from './pages/prompts.js';
import * as reference from './pages/reference.js';
import * as gateway from './pages/gateway.js';

const PUBLIC = {
  signin: auth.signIn,
  signup: auth.signUp,
  reset: auth.reset,
  'sso-callback': auth.ssoCallback,
  invite: auth.acceptInvite,
  'verify-email': auth.verifyEmail,
  'api-reference': reference.page,
};

const NAV = [
  ['Insights', [
    ['overview', 'Analytics', analytics.overview],
    ['logs', 'Request log', analytics.logs],
    ['policy-analytics', 'Policy analytics', analytics.policyAnalytics],
    ['reconciliation', 'Reconciliation', analytics.reconciliation],
  ]],
  ['Organization', [
    ['organization', 'Organization', org.organization],
    ['members', 'Members and invites', org.members],
    ['service-accounts', 'Service accounts', gateway.serviceAccounts],
    ['teams', 'Teams', org.teams],
    ['billing', 'Billing', org.billing],
    ['sso-connections', 'Single sign-on', org.sso],
    ['audit', 'Admin audit trail', org.audit],
  ]],
  ['Gateway', [
    ['keys', 'API keys', keys.apiKeys],
    ['provider-keys', 'Provider keys', keys.providerKeys],
    ['routes', 'Own providers and models', gateway.orgRoutes],
    ['policies', 'Policies', policy.policies],
    ['cache', 'Cache', policy.cache],
    ['webhooks', 'Webhooks', webhooks.webhooks],
    ['gateway', 'Gateway (operators)', gateway.gateway],
  ]],
  ['Build', [
    ['playground', 'Playground', prompts.playground],
    ['templates', 'Prompt templates', prompts.templates],
    ['experiments', 'Experiments', prompts.experiments],
  ]],
  ['You', [
    ['account', 'Account and security', auth.account],
    ['api-reference', 'API reference', reference.page],
  ]],
];

const DETAIL = {
  teams: org.team,
  keys: keys.apiKey,
  logs: analytics.logEntry,
  webhooks: webhooks.webhook,
  templates: prompts.template,
  experiments: prompts.experiment,
};

const PAGES = Object.fromEntries(NAV.flatMap(([, items]) => items.map(([id, , f]) => [id, f])));

/** `#/teams/123?x=1` → `{name: 'teams', id: '123', params}`. */
function parse(hash) {
  const [path, q] = hash.replace(/^#\/?/, '').split('?');
  const [name, id] = path.split('/');
  return { name: name || '', id: id ? decodeURIComponent(id) : null, params: new URLSearchParams(q || '') };
}

export function go(path) {
  if (window.location.hash === `#/${path}`) route();
  else window.location.hash = `#/${path}`;
}

function shell(active) {
  const s = currentSession();
  const menu = h('nav', { id: 'nav', 'aria-label': 'Console' });
  for (const [group, items] of NAV) {
    menu.append(h('h2', { class: 'nav-group' }, group), h('ul', {}, items.map(([id, label]) => h('li', {},
      h('a', { href: `#/${id}`, 'aria-current': id === active ? 'page' : undefined }, label)))));
  }
  const toggle = btn('Menu', () => {
    const open = document.body.classList.toggle('nav-open');
    toggle.setAttribute('aria-expanded', String(open));
  }, { kind: 'ghost' });
  toggle.setAttribute('aria-controls', 'nav');
  toggle.setAttribute('aria-expanded', 'false');
  toggle.classList.add('menu-toggle');
  const header = h(
    'header',
    { class: 'top' },
    toggle,
    h('a', { href: '#/overview', class: 'brand' }, 'gw'),
    h('span', { class: 'who' }, s.organization ? s.organization.name : '', ' · ', s.user ? s.user.email : '', ' · ', s.role || ''),
    btn('Sign out', signOut, { kind: 'ghost' }),
  );
  return { header, menu };
}

async function signOut() {
  try {
    await post('/auth/logout');
  } catch {
    // Signed out here whatever the server says: the tokens are forgotten below.
  }
  setSession(null);
  go('signin');
  announce('Signed out.');
}

let rendering = 0;

async function route() {
  const app = document.getElementById('app');
  const { name, id, params } = parse(window.location.hash);
  const signedIn = currentSession() !== null;
  const turn = ++rendering;
  let render;
  if (!signedIn) {
    render = PUBLIC[name];
    if (!render) {
      go('signin');
      return;
    }
  } else if (name === 'signin' || name === 'signup' || name === '') {
    go('overview');
    return;
  } else if (id && DETAIL[name]) {
    render = DETAIL[name];
  } else {
    render = PAGES[name] || PUBLIC[name];
  }
  const main = h('main', { id: 'main' });
  clear(app);
  document.body.classList.remove('nav-open');
  if (signedIn) {
    const { header, menu } = shell(id ? name : name);
    app.append(header, h('div', { class: 'layout' }, menu, main));
  } else {
    app.append(h('header', { class: 'top' }, h('a', { href: '#/signin', class: 'brand' }, 'gw'), h('span', { class: 'who' }, 'console')),
      h('div', { class: 'layout public' }, main));
  }
  if (!render) {
    main.append(h('h1', { id: 'page-title', tabindex: '-1' }, 'Not found'), errorBox(new Error(`no page "${name}"`)));
    return;
  }
  if (linkToken && name === linkToken.page && !params.get('token')) {
    params.set('token', linkToken.token);
    linkToken = null;
  }
  try {
    const nodes = await render({ id, params, go });
    if (turn !== rendering) return;
    main.append(...[nodes].flat(Infinity).filter(Boolean));
  } catch (e) {
    main.append(errorBox(e));
  }
  const title = document.getElementById('page-title');
  if (title) title.focus({ preventScroll: true });
}

onSession((s) => {
  if (s === null && !PUBLIC[parse(window.location.hash).name]) go('signin');
});
// Mailed links (`/reset-password#token=...`, `/accept-invite#token=...`, `/verify-email#token=...`)
// and the SSO callback's forward (`/console#/sso-callback?code=...`) carry their token in the
// fragment, which never reaches a server log; they become console pages here.
// The token is kept in memory and the address rewritten without it (nor in history).
const LINKS = { '/reset-password': 'reset', '/accept-invite': 'invite', '/verify-email': 'verify-email' };
let linkToken = null;
if (LINKS[window.location.pathname]) {
  const token = new URLSearchParams(window.location.hash.replace(/^#/, '')).get('token');
  if (token) linkToken = { page: LINKS[window.location.pathname], token };
  window.history.replaceState(null, '', `/console#/${LINKS[window.location.pathname]}`);
}
window.addEventListener('hashchange', route);
if (!window.location.hash) window.location.hash = '#/signin';
else route();
