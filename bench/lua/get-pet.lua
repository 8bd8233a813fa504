-- getPet on a random stored id between LOW and HIGH (set by the driver).
function init()
  math.randomseed(os.time())
end
function request()
  return wrk.format("GET", "/v1/pets/" .. math.random(LOW, HIGH))
end
