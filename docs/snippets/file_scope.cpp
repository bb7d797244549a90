// Wrapper for declarations (classes, functions) that need only the API: the snippet goes at file
// scope, and main() does nothing, so the test checks that the declarations compile.
#include <precis/precis.h>

#include <iostream>

using namespace precis;

// @snippet

int main() { return 0; }
