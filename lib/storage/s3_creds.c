/*
 * s3_creds.c - credentials and region as the AWS tools take them:
 * AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, else the
 * profile (--profile, AWS_PROFILE, "default") in AWS_SHARED_CREDENTIALS_FILE
 * or ~/.aws/credentials (or in the config file, which the CLI also reads);
 * the region from --region, AWS_REGION, AWS_DEFAULT_REGION, the profile's
 * "region" in AWS_CONFIG_FILE or ~/.aws/config ("[profile X]", "[default]"),
 * else us-east-1.  Not done: SSO, credential_process, instance metadata.
 */
#include "remote_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INI_MAX_BYTES (1u << 20)

static char *trim(char *s)
{
	char *e;

	while (*s == ' ' || *s == '\t')
		s++;
	e = s + strlen(s);
	while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r' ||
			 e[-1] == '\n'))
		*--e = '\0';
	return s;
}

/* Does the line "[...]" name @section? Both "[X]" and "[ X ]" do. */
static bool section_is(char *line, const char *section)
{
	char *e = strrchr(line, ']');

	if (!e)
		return false;
	*e = '\0';
	return strcmp(trim(line + 1), section) == 0;
}

static int ini_scan(FILE *f, const char *section, const char *name, char **out)
{
	char line[4096];
	bool in = false, nested = false;
	size_t total = 0;

	while (fgets(line, sizeof(line), f)) {
		total += strlen(line);
		if (total > INI_MAX_BYTES)
			return -1;
		/* An indented line after "key =" is a nested block
		 * ("s3 =\n  addressing_style = path"): not ours. */
		bool indented = line[0] == ' ' || line[0] == '\t';
		char *l = trim(line);

		if (!*l || *l == '#' || *l == ';')
			continue;
		if (*l == '[') {
			in = section_is(l, section);
			nested = false;
			continue;
		}
		if (!in || (indented && nested))
			continue;
		char *eq = strchr(l, '=');
		if (!eq)
			continue;
		*eq = '\0';
		char *k = trim(l), *v = trim(eq + 1);
		nested = !*v;
		if (strcmp(k, name) == 0 && *v) {
			*out = strdup(v);
			return *out ? 1 : -1;
		}
	}
	return ferror(f) ? -1 : 0;
}

int us_ini_get(const char *path, const char *section, const char *name,
	       char **out)
{
	FILE *f;
	int rc;

	*out = NULL;
	if (!path)
		return 0;
	f = fopen(path, "r");
	if (!f)
		return errno == ENOENT || errno == ENOTDIR ? 0 : -1;
	rc = ini_scan(f, section, name, out);
	fclose(f);
	return rc;
}

static const char *env_nonempty(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

/* @env, else ~/.aws/@file; malloc'd, or NULL with no HOME. */
static char *aws_file(const char *env, const char *file)
{
	const char *v = env_nonempty(env), *home = env_nonempty("HOME");
	char *p = NULL;

	if (v)
		return strdup(v);
	if (!home || asprintf(&p, "%s/.aws/%s", home, file) < 0)
		return NULL;
	return p;
}

/* The config file names profiles "[profile X]", except "[default]". */
static char *config_section(const char *profile)
{
	char *s = NULL;

	if (strcmp(profile, "default") == 0)
		return strdup("default");
	return asprintf(&s, "profile %s", profile) < 0 ? NULL : s;
}

static int profile_get(const char *cred_file, const char *cfg_file,
		       const char *profile, const char *name, char **out)
{
	int rc = us_ini_get(cred_file, profile, name, out);
	char *sec;

	if (rc != 0)
		return rc;
	sec = config_section(profile);
	if (!sec)
		return -1;
	rc = us_ini_get(cfg_file, sec, name, out);
	free(sec);
	return rc;
}

static enum us_status creds_from_env(struct us_creds *c)
{
	const char *k = env_nonempty("AWS_ACCESS_KEY_ID");
	const char *s = env_nonempty("AWS_SECRET_ACCESS_KEY");
	const char *t = env_nonempty("AWS_SESSION_TOKEN");

	if (!t)
		t = env_nonempty("AWS_SECURITY_TOKEN");
	if (!k || !s)
		return US_OK;
	c->key_id = strdup(k);
	c->secret = strdup(s);
	c->token = t ? strdup(t) : NULL;
	c->source = strdup("the environment (AWS_ACCESS_KEY_ID)");
	if (!c->key_id || !c->secret || (t && !c->token) || !c->source)
		return US_E_NOMEM;
	return US_OK;
}

static enum us_status creds_from_profile(struct us_creds *c,
					 const char *cred_file,
					 const char *cfg_file,
					 const char *profile, struct us_err *err)
{
	int a = profile_get(cred_file, cfg_file, profile,
			    "aws_access_key_id", &c->key_id);
	int b = profile_get(cred_file, cfg_file, profile,
			    "aws_secret_access_key", &c->secret);
	int t = profile_get(cred_file, cfg_file, profile,
			    "aws_session_token", &c->token);

	if (a < 0 || b < 0 || t < 0)
		return us_err_set(err, US_E_USAGE, cred_file ? cred_file : "~",
				  "cannot read the AWS credentials file");
	if (a == 1 && b == 1) {
		if (asprintf(&c->source, "profile %s in %s", profile,
			     cred_file ? cred_file : "~/.aws/credentials") < 0) {
			c->source = NULL;
			return US_E_NOMEM;
		}
		return US_OK;
	}
	free(c->key_id);
	free(c->secret);
	free(c->token);
	c->key_id = c->secret = c->token = NULL;
	return US_OK;
}

static enum us_status resolve_region(const struct us_remote_opts *o,
				     struct us_creds *c, const char *cfg_file,
				     const char *profile)
{
	const char *r = o->region && *o->region ? o->region : NULL;

	if (!r)
		r = env_nonempty("AWS_REGION");
	if (!r)
		r = env_nonempty("AWS_DEFAULT_REGION");
	if (r) {
		c->region = strdup(r);
		return c->region ? US_OK : US_E_NOMEM;
	}
	char *sec = config_section(profile);
	if (!sec)
		return US_E_NOMEM;
	int rc = us_ini_get(cfg_file, sec, "region", &c->region);
	free(sec);
	if (rc != 1)
		c->region = strdup("us-east-1");
	return c->region ? US_OK : US_E_NOMEM;
}

enum us_status us_creds_resolve(const struct us_remote_opts *o,
				struct us_creds *c, struct us_err *err)
{
	static const struct us_remote_opts none;
	const char *profile;
	char *cred_file = NULL, *cfg_file = NULL;
	enum us_status rc;

	memset(c, 0, sizeof(*c));
	if (!o)
		o = &none;
	profile = o->profile && *o->profile ? o->profile : NULL;
	bool named = profile != NULL || env_nonempty("AWS_PROFILE");
	if (!profile)
		profile = env_nonempty("AWS_PROFILE");
	if (!profile)
		profile = "default";
	cred_file = aws_file("AWS_SHARED_CREDENTIALS_FILE", "credentials");
	cfg_file = aws_file("AWS_CONFIG_FILE", "config");
	rc = resolve_region(o, c, cfg_file, profile);
	if (rc != US_OK || o->no_sign)
		goto out;
	/* An explicitly named profile wins over the environment's keys, as
	 * the CLI's --profile does; AWS_PROFILE alone does not. */
	if (!(o->profile && *o->profile))
		rc = creds_from_env(c);
	if (rc == US_OK && !c->key_id)
		rc = creds_from_profile(c, cred_file, cfg_file, profile, err);
	if (rc == US_OK && !c->key_id) {
		if (named)
			rc = us_err_set(err, US_E_USAGE, profile,
					"no such AWS profile with keys in %s",
					cred_file ? cred_file : "~/.aws/credentials");
		else
			rc = us_err_set(err, US_E_IO, "s3",
					"no AWS credentials: set AWS_ACCESS_KEY_ID and "
					"AWS_SECRET_ACCESS_KEY, add a profile to "
					"~/.aws/credentials, or use --no-sign-request");
	}
out:
	if (rc == US_E_NOMEM)
		us_err_set(err, rc, "s3", "out of memory");
	free(cred_file);
	free(cfg_file);
	if (rc != US_OK)
		us_creds_free(c);
	return rc;
}

void us_creds_free(struct us_creds *c)
{
	free(c->key_id);
	free(c->secret);
	free(c->token);
	free(c->region);
	free(c->source);
	memset(c, 0, sizeof(*c));
}
