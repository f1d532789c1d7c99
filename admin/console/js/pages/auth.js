// Signing up, in (password, second factor, SSO) and out, e-mailed links (reset, invite,
// address confirmation), and the account page (password, second factor, sign out everywhere).
import { h } from '../dom.js';
import { ApiError, api, currentSession, get, post, put, setSession } from '../api.js';
import { announce, btn, dl, errorBox, form, fmt, leaveTo, loaded, note, page, section, secretBox } from '../widgets.js';

function signedIn(tokens, go) {
  setSession(tokens);
  announce(`Signed in to ${tokens.organization ? tokens.organization.name : 'gw'}.`);
  go(tokens.scope === 'totp_enrollment' ? 'account' : 'overview');
}

export function signIn({ go }) {
  const holder = h('div');
  const render = (withCode, typed = {}) => {
    const f = form({
      label: 'Sign in',
      submit: 'Sign in',
      fields: [
        { name: 'email', label: 'E-mail', type: 'email', required: true, autocomplete: 'username', value: typed.email },
        { name: 'password', label: 'Password', type: 'password', required: true, value: typed.password },
        withCode && { name: 'totp_code', label: 'Code from your authenticator app', autocomplete: 'one-time-code', help: 'Or leave it empty and give a recovery code below.' },
        withCode && { name: 'recovery_code', label: 'Recovery code' },
        { name: 'organization_id', label: 'Organization id', help: 'Only if your address belongs to several organizations.', value: typed.organization_id },
      ].filter(Boolean),
      onSubmit: async (v) => {
        try {
          return await api('POST', '/auth/login', v, { noRefresh: true });
        } catch (e) {
          if (e instanceof ApiError && e.code === 'second_factor_required' && !withCode) {
            // The same form with the code field, what was typed kept, the focus on the code.
            render(true, v);
            announce('Enter the code from your authenticator app.');
            const code = holder.querySelector('input[name="totp_code"]');
            if (code) code.focus();
            return null;
          }
          throw e;
        }
      },
      onDone: (t) => t && signedIn(t, go),
    });
    holder.replaceChildren(f);
  };
  render(false);
  const sso = form({
    label: 'Single sign-on',
    submit: 'Continue with SSO',
    fields: [{ name: 'email', label: 'Work e-mail', type: 'email', required: true }],
    onSubmit: (v) => api('POST', '/auth/sso/initiate', v, { noRefresh: true }),
    onDone: (out) => leaveTo(out.authorization_url),
  });
  return page(
    'Sign in',
    section('With your password', holder,
      h('p', {}, h('a', { href: '#/reset' }, 'Forgot your password?'), ' · ', h('a', { href: '#/signup' }, 'Create an organization'))),
    section('With your company’s identity provider', sso),
    h('p', {}, h('a', { href: '#/api-reference' }, 'API reference')),
  );
}

export function signUp({ go }) {
  return page(
    'Create an organization',
    section('Your account and organization', form({
      label: 'Sign up',
      submit: 'Create organization',
      fields: [
        { name: 'name', label: 'Your name', required: true, autocomplete: 'name' },
        { name: 'email', label: 'E-mail', type: 'email', required: true, autocomplete: 'username' },
        { name: 'password', label: 'Password', type: 'password', required: true, autocomplete: 'new-password', help: 'At least 12 characters.' },
        { name: 'org_name', label: 'Organization name', required: true },
      ],
      onSubmit: (v) => api('POST', '/auth/register', v, { noRefresh: true }),
      onDone: (out, el) => {
        if (out && out.access_token) signedIn(out, go);
        else el.replaceWith(note(out && out.message ? out.message : 'Check your mail to confirm your address.', 'ok'));
      },
    })),
    h('p', {}, 'Have an account? ', h('a', { href: '#/signin' }, 'Sign in')),
  );
}

export function reset({ params, go }) {
  const token = params.get('token');
  if (token) {
    return page('Choose a new password', section('New password', form({
      label: 'New password',
      submit: 'Set password',
      fields: [{ name: 'new_password', label: 'New password', type: 'password', required: true, autocomplete: 'new-password' }],
      onSubmit: (v) => api('POST', '/auth/password-reset/confirm', { ...v, token }, { noRefresh: true }),
      onDone: () => {
        announce('Password changed: sign in with it.');
        go('signin');
      },
    })));
  }
  return page('Reset your password', section('Send a reset link', form({
    label: 'Password reset',
    submit: 'Send link',
    fields: [{ name: 'email', label: 'E-mail', type: 'email', required: true }],
    onSubmit: (v) => api('POST', '/auth/password-reset', v, { noRefresh: true }),
    onDone: (out, el) => el.replaceWith(note(out.message || 'If the address has an account, a link is on its way.', 'ok')),
  })), h('p', {}, h('a', { href: '#/signin' }, 'Back to sign in')));
}

export function acceptInvite({ params, go }) {
  const token = params.get('token') || '';
  return page('Accept an invitation', section('Join the organization', form({
    label: 'Accept invitation',
    submit: 'Join',
    fields: [
      { name: 'token', label: 'Invitation token', required: true, value: token },
      { name: 'name', label: 'Your name', help: 'For a new account.' },
      { name: 'password', label: 'Password', type: 'password', required: true, autocomplete: 'new-password', help: 'A new password, or your account’s if you have one.' },
      { name: 'totp_code', label: 'Second-factor code (an existing account with one)', autocomplete: 'one-time-code' },
      { name: 'recovery_code', label: 'Or a recovery code' },
    ],
    onSubmit: (v) => api('POST', '/auth/invites/accept', v, { noRefresh: true }),
    onDone: (t) => signedIn(t, go),
  })));
}

export function verifyEmail({ params, go }) {
  const token = params.get('token') || '';
  return page('Confirm your address', section('Create your organization', form({
    label: 'Confirm address',
    submit: 'Confirm',
    fields: [
      { name: 'token', label: 'Confirmation token', required: true, value: token },
      { name: 'password', label: 'The password you signed up with', type: 'password', required: true },
    ],
    onSubmit: (v) => api('POST', '/auth/verify-email', v, { noRefresh: true }),
    onDone: (t) => signedIn(t, go),
  })));
}

/** The identity provider sent the browser back: hand `code` and `state` to gw-admin. */
export async function ssoCallback({ params, go }) {
  const q = new URLSearchParams();
  for (const k of ['code', 'state', 'error', 'error_description', 'iss']) if (params.get(k)) q.set(k, params.get(k));
  try {
    const t = await api('GET', `/auth/sso/callback?${q}`, undefined, { noRefresh: true });
    if (t && t.link_token) {
      // An account already has this address: it proves itself once to link the identity.
      return page('Link your account', note(t.message || 'An account has this address: sign in with its password to link your identity.'),
        section('Prove it is yours', form({
          label: 'Link account',
          submit: 'Link and sign in',
          fields: [
            { name: 'password', label: 'Your password', type: 'password', required: true },
            { name: 'totp_code', label: 'Second-factor code (if on)', autocomplete: 'one-time-code' },
            { name: 'recovery_code', label: 'Or a recovery code' },
          ],
          onSubmit: (v) => api('POST', '/auth/sso/link', { ...v, link_token: t.link_token }, { noRefresh: true }),
          onDone: (tokens) => signedIn(tokens, go),
        })));
    }
    signedIn(t, go);
    return [];
  } catch (e) {
    return page('Single sign-on failed', errorBox(e), h('p', {}, h('a', { href: '#/signin' }, 'Back to sign in')));
  }
}

export function account({ go }) {
  const s = currentSession();
  const totp = loaded(() => get('/auth/totp'), (t, reload) => {
    const out = [dl([
      ['Second factor', t.enabled ? `on since ${fmt.time(t.enabled_at)}` : 'off'],
      ['Recovery codes left', t.enabled ? String(t.recovery_codes_left) : null],
      ['Required by the organization', t.required_by_organization ? 'yes' : 'no'],
    ])];
    if (!t.enabled) {
      const area = h('div');
      area.append(form({
        label: 'Set up second factor',
        submit: 'Set up',
        fields: [{ name: 'password', label: 'Your password', type: 'password', required: true }],
        onSubmit: (v) => post('/auth/totp/setup', v),
        onDone: (setup) => {
          area.replaceChildren(
            note('Add this secret to your authenticator app, then enter the code it shows.'),
            secretBox('Authenticator secret', setup.secret, 'Keep it private.'),
            dl([['otpauth URI', setup.otpauth_uri]]),
            form({
              label: 'Enable second factor',
              submit: 'Enable',
              fields: [{ name: 'code', label: 'Code from the app', required: true, autocomplete: 'one-time-code' }],
              onSubmit: (v) => post('/auth/totp/enable', v),
              onDone: (codes) => area.replaceChildren(
                secretBox('Recovery codes', codes.recovery_codes.join(' '), codes.warning),
                btn('Done', reload),
              ),
            }),
          );
        },
      }));
      out.push(area);
    } else {
      out.push(form({
        label: 'Turn off second factor',
        submit: 'Turn off',
        fields: [
          { name: 'password', label: 'Your password', type: 'password', required: true },
          { name: 'totp_code', label: 'Current code', autocomplete: 'one-time-code' },
          { name: 'recovery_code', label: 'Or a recovery code' },
        ],
        onSubmit: (v) => post('/auth/totp/disable', v),
        onDone: () => {
          announce('Second factor turned off.');
          reload();
        },
      }));
    }
    return out;
  });
  return page(
    'Account and security',
    dl([['Signed in as', s.user ? `${s.user.name} <${s.user.email}>` : ''], ['Organization', s.organization ? s.organization.name : ''], ['Role', s.role]]),
    s.scope === 'totp_enrollment' ? note('Your organization requires a second factor: set it up below to use the console.', 'warn') : null,
    section('Password', form({
      label: 'Change password',
      submit: 'Change password',
      fields: [
        { name: 'current_password', label: 'Current password', type: 'password', required: true },
        { name: 'new_password', label: 'New password', type: 'password', required: true, autocomplete: 'new-password' },
        { name: 'totp_code', label: 'Second-factor code (if on)', autocomplete: 'one-time-code' },
        { name: 'recovery_code', label: 'Or a recovery code' },
      ],
      onSubmit: (v) => post('/auth/password', v),
      onDone: (_, el) => {
        el.reset();
        announce('Password changed.');
      },
    })),
    section('Second factor (TOTP)', totp),
    section('Alerts by e-mail', loaded(() => get('/auth/me/alerts'), (a) => [
      a.mail_relay_configured ? null : note('This gateway has no mail relay configured: alerts are not sent.', 'warn'),
      form({
        label: 'Alerts by e-mail',
        submit: 'Save alerts',
        fields: [
          { name: 'budget', label: `Budget alerts to ${a.email}`, type: 'checkbox', value: a.budget },
          { name: 'security', label: `Security alerts to ${a.email}`, type: 'checkbox', value: a.security },
        ],
        onSubmit: (v) => put('/auth/me/alerts', v),
        onDone: () => announce('Alerts saved.'),
      }),
    ])),
    section('Sessions', h('p', {}, 'Ends every session of your account, on every device, this one included.'),
      btn('Sign out everywhere', async () => {
        await post('/auth/logout-all');
        setSession(null);
        go('signin');
        announce('Signed out everywhere.');
      }, { kind: 'danger' })),
  );
}
