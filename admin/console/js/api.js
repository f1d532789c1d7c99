// The one client of `/api/v1`. The session (access and refresh token) lives in this module's
// memory only: never in localStorage, sessionStorage or a cookie, so no other script, tab or
// later visitor can read it; a reload signs out (docs/console.md).

let session = null;
let refreshing = null;
const listeners = new Set();

export class ApiError extends Error {
  constructor(status, body) {
    const e = (body && body.error) || {};
    super(e.message || `the server answered ${status}`);
    this.status = status;
    this.code = e.code || 'error';
    this.fields = Array.isArray(e.fields) ? e.fields : [];
  }
}

export function currentSession() {
  return session;
}

export function onSession(f) {
  listeners.add(f);
}

export function setSession(tokens) {
  session = tokens
    ? {
        access: tokens.access_token,
        refresh: tokens.refresh_token,
        scope: tokens.scope,
        role: tokens.role,
        user: tokens.user,
        organization: tokens.organization,
      }
    : null;
  for (const f of listeners) f(session);
}

/** `?a=1&b=2` from an object, leaving out empty values. */
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  }
  const text = q.toString();
  return text ? `?${text}` : '';
}

async function send(method, path, body, token, accept) {
  const headers = { accept: accept || 'application/json' };
  if (token) headers.authorization = `Bearer ${token}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  return fetch(`/api/v1${path}`, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: 'same-origin',
    cache: 'no-store',
  });
}

async function refresh() {
  if (!session || !session.refresh) return false;
  if (!refreshing) {
    const token = session.refresh;
    refreshing = send('POST', '/auth/refresh', { refresh_token: token })
      .then(async (r) => {
        if (!r.ok) return false;
        setSession(await r.json());
        return true;
      })
      .catch(() => false)
      .finally(() => {
        refreshing = null;
      });
  }
  return refreshing;
}

const bodies = new WeakMap();

/** An error answer's body, read once however often it is asked for. */
async function bodyOf(res) {
  if (!bodies.has(res)) {
    let data = null;
    try {
      data = await res.json();
    } catch {
      data = null;
    }
    bodies.set(res, data);
  }
  return bodies.get(res);
}

async function errorOf(res) {
  const data = await bodyOf(res);
  return (data && data.error) || {};
}

async function answer(res) {
  if (res.status === 204) return null;
  const type = res.headers.get('content-type') || '';
  if (type.includes('json')) return res.json();
  return res.text();
}

/** Calls `/api/v1`; resolves to the decoded body, rejects with an `ApiError`. */
export async function api(method, path, body, opts = {}) {
  let res = await send(method, path, body, session && session.access, opts.accept);
  // A 401 that asks for the second factor is about the form, not the session.
  const expired = async (r) => r.status === 401 && session && !opts.noRefresh && (await errorOf(r)).code !== 'second_factor_required';
  if ((await expired(res)) && (await refresh())) {
    res = await send(method, path, body, session.access, opts.accept);
  }
  if (await expired(res)) {
    setSession(null);
  }
  if (!res.ok) {
    throw new ApiError(res.status, await bodyOf(res));
  }
  if (opts.raw) return res;
  return answer(res);
}

export const get = (path, params) => api('GET', path + query(params));
export const post = (path, body) => api('POST', path, body);
export const put = (path, body) => api('PUT', path, body);
export const patch = (path, body) => api('PATCH', path, body);
export const del = (path) => api('DELETE', path);
