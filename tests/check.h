/* Moved to tests/support/check.h (CHECK and gp_t_die, with the support library tests link
 * through test_dep). This forwarder only keeps tests written before the move compiling; new
 * tests include tests/support/check.h. */
#include "tests/support/check.h"
