// Wrapper for statements that need nothing but the API: the snippet is main()'s body.
#include <precis/precis.h>

#include <iostream>

using namespace precis;

int main() {
  // @snippet
  return 0;
}
