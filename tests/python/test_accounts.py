"""Accounts people can recover, end to end with real parts: mail delivered by gw's outbox relay
to a real SMTP server (aiosmtpd, the `smtp` fixture), and a second factor computed as an
authenticator app would (pyotp)."""

import time
import uuid

import httpx
import pyotp
import pytest

from conftest import psql, run_stack

PASSWORD = "correct horse battery"
NEW_PASSWORD = "a brand new passphrase"


def api(stack, method, path, token=None, **kw):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.request(method, f"{stack['admin']}/api/v1{path}", headers=headers, timeout=30, **kw)


def register(stack):
    email = f"acct-{uuid.uuid4().hex[:10]}@test.gw"
    r = api(stack, "POST", "/auth/register",
            json={"email": email, "password": PASSWORD, "name": "Person", "org_name": "Acct Org"})
    assert r.status_code == 201, r.text
    return email, r.json()


def login(stack, email, password=PASSWORD, **extra):
    return api(stack, "POST", "/auth/login", json={"email": email, "password": password, **extra})


def token_in(body, prefix):
    start = body.index(prefix)
    end = start
    while end < len(body) and (body[end].isalnum() or body[end] == "_"):
        end += 1
    return body[start:end]


def enroll(stack, email, token):
    """Sets up and enables TOTP; returns (pyotp.TOTP, recovery codes)."""
    r = api(stack, "POST", "/auth/totp/setup", token, json={"password": PASSWORD})
    assert r.status_code == 200, r.text
    setup = r.json()
    assert setup["otpauth_uri"].startswith("otpauth://totp/")
    totp = pyotp.TOTP(setup["secret"])
    assert pyotp.parse_uri(setup["otpauth_uri"]).secret == setup["secret"]
    # Kept on the object: a test replays exactly this code (`totp.now()` moves on every 30 s).
    totp.enrolled_with = totp.now()
    r = api(stack, "POST", "/auth/totp/enable", token, json={"code": totp.enrolled_with})
    assert r.status_code == 200, r.text
    codes = r.json()["recovery_codes"]
    assert len(codes) == 10 and len(set(codes)) == 10
    return totp, codes


def next_code(totp):
    """A code of the next time step: the current one was spent enrolling (a code works once)."""
    return totp.at(time.time() + 30)


# -- mail -------------------------------------------------------------------------------------------

def test_a_password_reset_mail_arrives_and_its_link_works_once(stack, smtp):
    email, _ = register(stack)
    r = api(stack, "POST", "/auth/password-reset", json={"email": email})
    assert r.status_code == 202, r.text
    subject, body = smtp.wait_for(email, "Reset")
    assert subject == "Reset your gw password"
    token = token_in(body, "pwr_")
    r = api(stack, "POST", "/auth/password-reset/confirm", json={"token": token, "new_password": NEW_PASSWORD})
    assert r.status_code == 204, r.text
    assert login(stack, email, NEW_PASSWORD).status_code == 200
    r = api(stack, "POST", "/auth/password-reset/confirm", json={"token": token, "new_password": "another passphrase!"})
    assert r.status_code == 400 and r.json()["error"]["fields"][0]["field"] == "token", r.text
    # Delivered once, and recorded as sent.
    assert smtp.count_to(email) == 1
    assert psql(f"SELECT count(*) FROM email_outbox WHERE to_address = '{email}' AND sent_at IS NOT NULL") == "1"


def test_no_mail_goes_to_an_address_without_an_account(stack, smtp):
    nobody = f"nobody-{uuid.uuid4().hex[:10]}@test.gw"
    assert api(stack, "POST", "/auth/password-reset", json={"email": nobody}).status_code == 202
    # The relay polls every second; an account's mail would have arrived by now (see above).
    email, _ = register(stack)
    api(stack, "POST", "/auth/password-reset", json={"email": email})
    smtp.wait_for(email, "Reset")
    assert smtp.count_to(nobody) == 0


def test_an_invite_mail_arrives_its_link_works_once_and_the_inviter_never_sees_the_token(stack, smtp):
    _, owner = register(stack)
    invitee = f"invitee-{uuid.uuid4().hex[:10]}@test.gw"
    r = api(stack, "POST", "/invites", owner["access_token"], json={"email": invitee, "role": "member"})
    assert r.status_code == 201, r.text
    created = r.json()
    assert created["delivery"] == "mail" and created["token"] is None
    _, body = smtp.wait_for(invitee, "invited")
    token = token_in(body, "inv_")
    accept = {"token": token, "name": "Invitee", "password": PASSWORD}
    r = api(stack, "POST", "/auth/invites/accept", json=accept)
    assert r.status_code == 201, r.text
    assert r.json()["organization"]["id"] == owner["organization"]["id"]
    r = api(stack, "POST", "/auth/invites/accept", json=accept)
    assert r.status_code == 400 and r.json()["error"]["fields"][0]["field"] == "token", r.text


@pytest.fixture(scope="module")
def verifying_stack(dns, smtp):
    """A stack whose sign-ups confirm the address first (`admin.email_verification`)."""
    yield from run_stack(GW_STACK_DNS=dns.address, GW_STACK_SMTP_URL=smtp.url,
                         GW_STACK_ADMIN_CONFIG="email_verification = true")


def test_a_sign_up_confirmation_mail_arrives_and_its_link_works_once(verifying_stack, smtp):
    email = f"signup-{uuid.uuid4().hex[:10]}@test.gw"
    r = api(verifying_stack, "POST", "/auth/register",
            json={"email": email, "password": PASSWORD, "name": "New", "org_name": "New Org"})
    assert r.status_code == 202, r.text
    _, body = smtp.wait_for(email, "Confirm")
    token = token_in(body, "ver_")
    confirm = {"token": token, "password": PASSWORD}
    r = api(verifying_stack, "POST", "/auth/verify-email", json=confirm)
    assert r.status_code == 201, r.text
    assert r.json()["user"]["email"] == email
    r = api(verifying_stack, "POST", "/auth/verify-email", json=confirm)
    assert r.status_code == 400 and r.json()["error"]["fields"][0]["field"] == "token", r.text


# -- second factor ------------------------------------------------------------------------------------

def test_totp_required_by_the_organization_blocks_a_sign_in_without_the_code(stack):
    email, owner = register(stack)
    totp, codes = enroll(stack, email, owner["access_token"])
    r = api(stack, "PATCH", "/organizations/current", owner["access_token"], json={"require_totp": True})
    assert r.status_code == 200 and r.json()["require_totp"] is True, r.text

    r = login(stack, email)
    assert r.status_code == 401, r.text
    assert r.json()["error"]["code"] == "second_factor_required"
    r = login(stack, email, totp_code="000000")
    assert r.status_code == 401 and r.json()["error"]["code"] == "second_factor_required"
    # The code used to enroll is spent: it does not sign in again.
    r = login(stack, email, totp_code=totp.enrolled_with)
    assert r.status_code == 401, r.text
    r = login(stack, email, totp_code=next_code(totp))
    assert r.status_code == 200, r.text
    assert r.json()["scope"] == "full"
    # A recovery code signs in once.
    r = login(stack, email, recovery_code=codes[0].upper())
    assert r.status_code == 200, r.text
    r = login(stack, email, recovery_code=codes[0])
    assert r.status_code == 401 and r.json()["error"]["code"] == "second_factor_required"
    third = login(stack, email, recovery_code=codes[1])
    assert third.status_code == 200, third.text
    status = api(stack, "GET", "/auth/totp", third.json()["access_token"]).json()
    assert status["enabled"] is True and status["recovery_codes_left"] == 8
    assert status["required_by_organization"] is True
    # A wrong password with a right code is still a wrong password.
    r = login(stack, email, "not the password!!", recovery_code=codes[2])
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"


def test_a_member_without_a_second_factor_may_only_enroll_one(stack, smtp):
    email, owner = register(stack)
    r = api(stack, "PATCH", "/organizations/current", owner["access_token"], json={"require_totp": True})
    assert r.status_code == 200, r.text
    # The owner (without a second factor) signs in: a session good only for enrolling.
    r = login(stack, email)
    assert r.status_code == 200, r.text
    limited = r.json()
    assert limited["scope"] == "totp_enrollment"
    r = api(stack, "GET", "/teams", limited["access_token"])
    assert r.status_code == 403 and "second factor" in r.json()["error"]["message"], r.text
    status = api(stack, "GET", "/auth/totp", limited["access_token"]).json()
    assert status["enabled"] is False and status["required_by_organization"] is True
    enroll(stack, email, limited["access_token"])
    # Enrolled: the same session does everything now.
    assert api(stack, "GET", "/teams", limited["access_token"]).status_code == 200


def test_only_an_owner_requires_a_second_factor(stack, smtp):
    _, owner = register(stack)
    invitee = f"adm-{uuid.uuid4().hex[:10]}@test.gw"
    api(stack, "POST", "/invites", owner["access_token"], json={"email": invitee, "role": "admin"})
    token = token_in(smtp.wait_for(invitee, "invited")[1], "inv_")
    r = api(stack, "POST", "/auth/invites/accept", json={"token": token, "name": "Adm", "password": PASSWORD})
    admin = r.json()["access_token"]
    r = api(stack, "PATCH", "/organizations/current", admin, json={"require_totp": True})
    assert r.status_code == 403, r.text


def test_disabling_the_second_factor_needs_it(stack):
    email, s = register(stack)
    totp, codes = enroll(stack, email, s["access_token"])
    r = api(stack, "POST", "/auth/totp/disable", s["access_token"], json={"password": PASSWORD})
    assert r.status_code == 401 and r.json()["error"]["code"] == "second_factor_required", r.text
    r = api(stack, "POST", "/auth/totp/disable", s["access_token"],
            json={"password": PASSWORD, "totp_code": next_code(totp)})
    assert r.status_code == 204, r.text
    assert login(stack, email).status_code == 200
    assert api(stack, "GET", "/auth/totp", s["access_token"]).json()["enabled"] is False
