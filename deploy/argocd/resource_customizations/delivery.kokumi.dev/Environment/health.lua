-- Argo CD health of a Kokumi Environment, from its Ready condition: Healthy when Orders deploy to
-- at least one selected Cluster, Progressing while Kokumi has not reconciled it (or not its latest
-- generation), Degraded with the reason and message otherwise (NoClusters, NoClusterReady, ...).
local hs = {}
local ready = nil
if obj.status ~= nil and obj.status.conditions ~= nil then
  for _, condition in ipairs(obj.status.conditions) do
    if condition.type == "Ready" then
      ready = condition
    end
  end
end
if ready == nil then
  hs.status = "Progressing"
  hs.message = "Kokumi has not reported on this Environment yet: if it stays so, check that the Kokumi manager runs"
  return hs
end
local generation = obj.metadata.generation
local observed = obj.status.observedGeneration
if ready.observedGeneration ~= nil and (observed == nil or ready.observedGeneration < observed) then
  observed = ready.observedGeneration
end
if generation ~= nil and (observed == nil or observed < generation) then
  hs.status = "Progressing"
  hs.message = "Kokumi has not reconciled generation " .. tostring(generation) .. " of this Environment yet"
  return hs
end
local message = ready.message or ""
if ready.status == "True" then
  hs.status = "Healthy"
  hs.message = message
elseif ready.status == "False" then
  hs.status = "Degraded"
  hs.message = (ready.reason or "NotReady") .. ": " .. message
else
  hs.status = "Progressing"
  hs.message = (ready.reason or "Unknown") .. ": " .. message
end
return hs
