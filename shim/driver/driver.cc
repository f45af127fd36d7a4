#include "shim/driver/driver.h"

namespace memvirt::shim {

bool LoadDriver(SymbolResolver resolve, void* context, Driver* driver, const char** missing) {
  Driver d;
#define MEMSHIM_LOAD_MEMBER(name, required)                             \
  d.name = reinterpret_cast<decltype(d.name)>(resolve(context, #name)); \
  if ((required) && d.name == nullptr) {                                \
    if (missing != nullptr) *missing = #name;                           \
    return false;                                                       \
  }
  MEMSHIM_DRIVER_FUNCTIONS(MEMSHIM_LOAD_MEMBER)
#undef MEMSHIM_LOAD_MEMBER
  *driver = d;
  return true;
}

}  // namespace memvirt::shim
