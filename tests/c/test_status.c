/*
 * test_status.c - the status table: values, names and descriptions.
 */
#include <limits.h>

#include "harness.h"

/* Every row of LMCA_STATUS_MAP, expanded independently of status.c. */
static const struct row {
    const char *name;
    int value;
    const char *text;
} rows[] = {
#define ROW(name, value, text) {#name, value, text},
    LMCA_STATUS_MAP(ROW)
#undef ROW
};
#define NROWS (sizeof rows / sizeof rows[0])

TEST(status_values_are_distinct)
{
    for (size_t i = 0; i < NROWS; i++)
        for (size_t j = i + 1; j < NROWS; j++)
            if (rows[i].value == rows[j].value)
                th_fail(__FILE__, __LINE__, "%s and %s share value %d", rows[i].name,
                        rows[j].name, rows[i].value);
}

TEST(status_enum_matches_map_values)
{
    /* The enum is generated from the map; spot-check the documented anchors. */
    ASSERT_EQ(LMCA_OK, 0);
    ASSERT_EQ(LMCA_MISS, 1);
    ASSERT_EQ(LMCA_EINVAL, -1);
    ASSERT_EQ(LMCA_ECANCELED, -13);
}

TEST(status_errors_are_negative)
{
    for (size_t i = 0; i < NROWS; i++) {
        bool is_error = rows[i].name[0] == 'E';
        if (is_error && rows[i].value >= 0)
            th_fail(__FILE__, __LINE__, "%s = %d is not negative", rows[i].name,
                    rows[i].value);
        if (!is_error && rows[i].value < 0)
            th_fail(__FILE__, __LINE__, "%s = %d is negative", rows[i].name, rows[i].value);
    }
}

TEST(status_name_matches_map_name)
{
    for (size_t i = 0; i < NROWS; i++) {
        const char *got = lmca_status_name(rows[i].value);
        ASSERT(got != NULL);
        if (strcmp(got, rows[i].name) != 0)
            th_fail(__FILE__, __LINE__, "lmca_status_name(%d) = \"%s\", want \"%s\"",
                    rows[i].value, got, rows[i].name);
    }
}

TEST(status_strerror_is_map_text_and_not_empty)
{
    for (size_t i = 0; i < NROWS; i++) {
        const char *got = lmca_strerror(rows[i].value);
        ASSERT(got != NULL);
        if (got[0] == '\0')
            th_fail(__FILE__, __LINE__, "lmca_strerror(%s) is empty", rows[i].name);
        if (strcmp(got, rows[i].text) != 0)
            th_fail(__FILE__, __LINE__, "lmca_strerror(%s) = \"%s\", want \"%s\"",
                    rows[i].name, got, rows[i].text);
    }
}

TEST(status_unknown_value_is_unknown_status)
{
    const int unknown[] = {2, 3, -15, 100, -100, INT_MAX, INT_MIN};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        if (strcmp(lmca_status_name(unknown[i]), "UNKNOWN_STATUS") != 0)
            th_fail(__FILE__, __LINE__, "lmca_status_name(%d) = \"%s\"", unknown[i],
                    lmca_status_name(unknown[i]));
        ASSERT(lmca_strerror(unknown[i]) != NULL);
        ASSERT(lmca_strerror(unknown[i])[0] != '\0');
    }
}

TEST_LIST = {
    T(status_values_are_distinct),
    T(status_enum_matches_map_values),
    T(status_errors_are_negative),
    T(status_name_matches_map_name),
    T(status_strerror_is_map_text_and_not_empty),
    T(status_unknown_value_is_unknown_status),
};
TEST_MAIN()
