-- Thread i talks to instance PORTS[i] (set by the driver): one wrk, several instances.
local next = 1
function setup(thread)
  thread.addr = wrk.lookup(wrk.host, tostring(PORTS[next]))[1]
  next = next % #PORTS + 1
end
