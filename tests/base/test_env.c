/* test_env.c — dpt_env_int(_parse) and dpt_env_str: unset and empty are unset;
 * whole decimal integers in range are taken; everything else is refused with a
 * message that names the variable, its value, the range and what to do. */
#include "dpt_check.h"
#include "dpt_env.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

static void good(const char *v, int lo, int hi, int want)
{
  struct dpt_err err = {0};
  int out = -777;
  int rc = dpt_env_int_parse("DPT_T", v, lo, hi, NULL, &out, &err);
  CHECK(rc == 1 && out == want, "\"%s\" in %d..%d: rc %d out %d, want 1 and %d (%s)", v, lo, hi, rc, out, want,
        err.msg);
}

static void bad(const char *v, int lo, int hi, const char *hint, const char *needle)
{
  struct dpt_err err = {0};
  int out = -777;
  int rc = dpt_env_int_parse("DPT_T", v, lo, hi, hint, &out, &err);
  CHECK(rc == DPT_E_INPUT && err.code == DPT_E_INPUT, "\"%s\" in %d..%d: rc %d, want DPT_E_INPUT", v, lo, hi, rc);
  CHECK(out == -777, "\"%s\": *out changed on error (%d)", v, out);
  CHECK(strstr(err.msg, needle), "\"%s\": message lacks \"%s\": %s", v, needle, err.msg);
}

int main(void)
{
  struct dpt_err err = {0};
  int out = -777;

  /* unset and empty: 0, *out untouched */
  CHECK(dpt_env_int_parse("DPT_T", NULL, 0, 9, NULL, &out, &err) == 0 && out == -777, "NULL is not unset");
  CHECK(dpt_env_int_parse("DPT_T", "", 0, 9, NULL, &out, &err) == 0 && out == -777, "\"\" is not unset");

  good("0", 0, 9, 0);
  good("9", 0, 9, 9);
  good("-3", -5, 5, -3);
  good("+4", 0, 9, 4);
  good("2147483647", 0, INT_MAX, INT_MAX);
  good("007", 0, 9, 7);

  bad("10", 0, 9, NULL, "DPT_T=\"10\" is not an integer in 0..9: fix or unset it");
  bad("-1", 0, 9, NULL, "DPT_T=\"-1\" is not an integer in 0..9");
  bad("x", 0, 9, NULL, "DPT_T=\"x\"");
  bad("1x", 0, 9, NULL, "DPT_T=\"1x\"");
  bad("1 ", 0, 9, NULL, "DPT_T=\"1 \"");
  bad("1.0", 0, 9, NULL, "DPT_T=\"1.0\"");
  bad("0x10", 0, 99, NULL, "DPT_T=\"0x10\"");
  bad("2147483648", 0, INT_MAX, NULL, "DPT_T=\"2147483648\" is not an integer >= 0");
  bad("99999999999999999999999", INT_MIN, INT_MAX, NULL, "is not an integer >=");
  bad("-5", 0, INT_MAX, "start it with srun", "DPT_T=\"-5\" is not an integer >= 0: start it with srun");
  /* a long value is cut in the message, the message still names the range */
  bad("11111111111111111111111111111111111111111111111111111111111111111111111111111111", 0, 9, NULL, "0..9");
  /* err may be NULL */
  CHECK(dpt_env_int_parse("DPT_T", "z", 0, 9, NULL, &out, NULL) == DPT_E_INPUT && out == -777, "NULL err");

  /* the process environment */
  unsetenv("DPT_TEST_ENV_X");
  CHECK(dpt_env_str("DPT_TEST_ENV_X") == NULL, "unset variable is not NULL");
  CHECK(dpt_env_int("DPT_TEST_ENV_X", 0, 9, NULL, &out, &err) == 0 && out == -777, "unset variable read");
  setenv("DPT_TEST_ENV_X", "", 1);
  CHECK(dpt_env_str("DPT_TEST_ENV_X") == NULL, "empty variable is not NULL");
  CHECK(dpt_env_int("DPT_TEST_ENV_X", 0, 9, NULL, &out, &err) == 0, "empty variable read");
  setenv("DPT_TEST_ENV_X", "8", 1);
  CHECK(dpt_env_str("DPT_TEST_ENV_X") && !strcmp(dpt_env_str("DPT_TEST_ENV_X"), "8"), "value not returned");
  CHECK(dpt_env_int("DPT_TEST_ENV_X", 0, 9, NULL, &out, &err) == 1 && out == 8, "8 not read");
  setenv("DPT_TEST_ENV_X", "18", 1);
  CHECK(dpt_env_int("DPT_TEST_ENV_X", 0, 9, NULL, &out, &err) == DPT_E_INPUT &&
            strstr(err.msg, "DPT_TEST_ENV_X=\"18\" is not an integer in 0..9"),
        "18 not refused: %s", err.msg);

  if (failures)
    fprintf(stderr, "test_env: %d check(s) failed\n", failures);
  else
    printf("test_env: ok\n");
  return failures != 0;
}
