/* fuzz_manifest.c: the libFuzzer target of a file set's manifest (manifest.c: SET-2, SET-3,
 * SET-4), the one part of a set that parses text.  `make fuzz-manifest` builds it (clang);
 * run it on the set vectors' manifests with the dictionary:
 *
 *   build/fuzz-manifest -dict=fuzz/manifest.dict CORPUS/ SEEDS/
 *
 * A rejection is a normal outcome; a sanitizer report, a crash, a leak or a hang is a finding.
 * Extra checks: a rejection is SET_BAD_MANIFEST or SET_UNSUPPORTED with a message, and an
 * accepted manifest holds what SET-2 and SET-4 promise.
 */
#include "../awq2.h"

#include <stdlib.h>
#include <string.h>

static void check_accepted(const awq2_manifest *m)
{
    if (m->count < 1 || m->count > AWQ2_MAX_SET_FILES || !m->files)
        abort();
    if (m->rank_set && !m->tp_size.huge && m->tp_size.value == 0)
        abort();
    for (size_t i = 0; i < m->count; i++) {
        const awq2_set_file *f = &m->files[i];
        size_t n = f->name_length;
        if (n < 5 || strlen(f->name) != n || memcmp(f->name + n - 5, ".awq2", 5) != 0 ||
            f->name[0] == '.' || strchr(f->name, '/') || strchr(f->name, '\\'))
            abort(); /* SET-4 */
        if (strlen(f->header_crc) != 8 || strlen(f->sha256) != 64)
            abort();
        if (m->rank_set && !m->tp_size.huge && (f->rank.huge || f->rank.value >= m->tp_size.value))
            abort();
        for (size_t j = 0; j < i; j++)
            if (m->files[j].name_length == n && memcmp(m->files[j].name, f->name, n) == 0)
                abort(); /* SET-4: listed once */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint8_t empty[1];
    awq2_manifest m;
    awq2_error err = {NULL, 0, ""};
    int rc = awq2_parse_manifest(size ? data : empty, size, &m, &err);
    if (rc == 0)
        check_accepted(&m);
    else if (rc == -1 && (!err.code || !err.message[0] ||
                          (strcmp(err.code, "SET_BAD_MANIFEST") && strcmp(err.code, "SET_UNSUPPORTED"))))
        abort();
    awq2_manifest_free(&m);
    return 0;
}
